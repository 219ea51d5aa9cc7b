package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/store"
)

// slashNew resets the history to the system prompt. The session id, cwd and
// remembered permission answers are kept. With persistence, the old
// conversation is first kept under a new id, which the session's provenance
// then points at.
func (s *session) slashNew(ctx actor.Context, t *turn) {
	forgotten := len(s.history) - 1
	if s.writer != nil && forgotten > 0 {
		if kept := s.keepAs(); kept != "" {
			s.prov = store.Provenance{SessionID: s.id, ParentSessionID: kept, Kind: "continuation", CompressionDepth: s.prov.CompressionDepth}
			s.rt.log.Info(fmt.Sprintf("[acp] session %s: previous conversation kept as %s", s.id, kept))
		}
	}
	s.history = s.history[:1:1]
	s.sys.shown = nil // the subfolders' instructions went with the conversation
	s.lastUsed = 0
	s.compactFails, s.compactWait = 0, 0
	if len(s.plan) > 0 {
		s.setPlan(nil) // the plan was the forgotten conversation's
	}
	s.say(fmt.Sprintf("🆕 New session: %d message(s) forgotten.", forgotten))
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: new session, %d message(s) forgotten", s.id, forgotten))
	s.finish(ctx, t, acp.StopReasonEndTurn, "")
}

// slashCompact compresses the history now: the turns older than the last
// context.keepLastTurns are summarised by the model. It needs a turn slot,
// like any model call.
func (s *session) slashCompact(ctx actor.Context, t *turn) {
	t.compact = true
	if older, _ := s.split(s.rt.cfg.Context.KeepLastTurns); older == 0 {
		keep := s.rt.cfg.Context.KeepLastTurns
		s.compactLine(fmt.Sprintf("🗜️ nothing to compact: %d message(s), no turn older than the last %d", len(s.history)-1, keep))
		s.finish(ctx, t, acp.StopReasonEndTurn, "")
		return
	}
	s.acquire(ctx, t)
}

// compactLine says and logs a /compact outcome.
func (s *session) compactLine(line string) {
	s.say(line)
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: /compact — %s", s.id, line))
}
