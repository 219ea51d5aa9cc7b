package actors

import (
	"fmt"

	"github.com/mm-agent/mm/llm"
)

// The window cap: a session never sends the model more than its context
// window. Compression keeps the history small while it works; when it
// fails, or a turn's tool results pile up, the oldest messages are left
// out of the request — not out of the history, which the session file and
// /compact still have — and the model reads a marker saying so. Sizes are
// the estimate's: four bytes a token, ImageTokens an image.

// msgChars is a message's size in bytes as estimate counts it.
func msgChars(m *llm.Message) int {
	n := len(m.Content) + 4 + 4*llm.ImageTokens*len(m.Images)
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

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

// promptTooLarge says why a prompt cannot be sent at all, "" when it fits:
// with the system prompt and the tools, it alone is over the window.
func (s *session) promptTooLarge(user *llm.Message) string {
	limit := s.requestLimit()
	if limit == 0 || msgChars(&s.history[0])+msgChars(user) <= limit {
		return ""
	}
	window := s.rt.windowFor(s.modelID)
	if fixed := msgChars(&s.history[0]) + s.toolChars(); fixed >= 4*window*3/4 {
		return fmt.Sprintf("the model's context window of %d tokens is too small for mm: the system prompt and the tool definitions alone take about %d tokens, and the answer needs room too (set model.contextWindow to the server's real window, or use a model with a larger one)",
			window, fixed/4)
	}
	return fmt.Sprintf("the prompt is too large for the model: about %d tokens (%d with the system prompt and the tool definitions), and the model's context window is %d tokens",
		msgChars(user)/4, (msgChars(&s.history[0])+msgChars(user)+s.toolChars())/4, window)
}

// fit returns the messages of the turn's next model call: the whole
// history when it fits, else the system prompt and the newest turns that
// fit, the first of them marked. When even the current turn does not fit,
// its question is kept with the newest of its model calls and their
// results. left is how many messages were left out; err is set when not
// even that fits.
//
// It walks back from the newest message and stops at the limit, so its
// cost is that of the request, not of the history.
func (s *session) fit(t *turn) (msgs []llm.Message, left int, err string) {
	h := s.history
	limit := s.requestLimit()
	whole := h[:len(h):len(h)]
	if limit == 0 {
		return whole, 0, ""
	}
	start, used := fits(h, 1, msgChars(&h[0]), limit)
	if start == 1 {
		return whole, 0, ""
	}
	// The oldest turn start from which the rest fits. The marker joins
	// that message, so it must fit too.
	q := min(t.histStart, len(h)-1)
	for i := start; i <= q; i++ {
		if h[i].Role == llm.RoleUser {
			note := fmt.Sprintf("[%d earlier messages of this conversation are left out of this request: they no longer fit your context window. The user still sees them; ask if you need something from them.]\n\n", i-1)
			if used+len(note) <= limit {
				first := h[i]
				first.Content = note + first.Content
				msgs = append(append(append(make([]llm.Message, 0, len(h)-i+1), h[0]), first), h[i+1:]...)
				return msgs, i - 1, ""
			}
		}
		used -= msgChars(&h[i])
	}
	// The current turn alone is too big: keep its question, then the
	// newest model calls with their results.
	question := h[q]
	note := "\n\n[Earlier model calls of this turn and their results are left out of this request: they no longer fit your context window.]"
	start, _ = fits(h, q+1, msgChars(&h[0])+msgChars(&question)+len(note), limit)
	for j := start; j < len(h); j++ {
		if h[j].Role != llm.RoleAssistant {
			continue
		}
		question.Content += note
		msgs = append(append(append(make([]llm.Message, 0, len(h)-j+2), h[0]), question), h[j:]...)
		return msgs, j - 2, ""
	}
	return nil, 0, fmt.Sprintf("the conversation no longer fits the model's context window of %d tokens, not even the question and the last tool results (about %d tokens): use /compact or /new",
		s.rt.windowFor(s.modelID), (msgChars(&question)+msgChars(&h[len(h)-1]))/4)
}

// fits returns the first index at or after from from which h's messages
// fit in limit bytes with used already taken (len(h) when none does), and
// the bytes then used.
func fits(h []llm.Message, from, used, limit int) (int, int) {
	i := len(h)
	for i > from && used+msgChars(&h[i-1]) <= limit {
		used += msgChars(&h[i-1])
		i--
	}
	return i, used
}
