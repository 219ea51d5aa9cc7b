package actors

import (
	"github.com/mm-agent/mm/history"
)

// The window cap (history.Fit): a session never sends the model more than
// its context window. The session gives history its figures: the limit
// its model and tools leave.

// requestLimit is how many bytes of messages a request may hold: the
// window less the room the answer needs (model.maxTokens, else an eighth of
// the window) and the tool definitions. 0 means no cap: the window is
// unknown.
func (s *session) requestLimit() int {
	window := s.rt.windowFor(s.modelID)
	if window <= 0 {
		return 0
	}
	reserve := window / 8
	if n := s.rt.cfg.Model.MaxTokens; n > 0 {
		reserve = min(n, window/2)
	}
	return max(4*(window-reserve)-s.toolChars(), 1)
}

// toolChars is the size of the tool definitions every request carries.
func (s *session) toolChars() int {
	n := 0
	for i := range s.toolDefs {
		d := &s.toolDefs[i]
		n += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	return n
}

// promptTooLarge says why a prompt cannot be sent at all, "" when it fits
// (history.TooLarge).
func (s *session) promptTooLarge(user *history.Message) string {
	return history.TooLarge(&s.history[0], user, s.toolChars(), s.requestLimit(), s.rt.windowFor(s.modelID))
}

// fit returns the messages of the turn's next model call (history.Fit):
// left is how many were left out; err is set when not even the turn fits.
func (s *session) fit(t *turn) (msgs []history.Message, left int, err string) {
	return history.Fit(s.history, t.histStart, s.requestLimit(), s.rt.windowFor(s.modelID))
}
