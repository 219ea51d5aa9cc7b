package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/llm"
)

// say streams one line from the agent to the client.
func (s *session) say(text string) {
	s.rt.out.Update(s.id, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{
		Content: acp.TextBlock(text),
	}})
}

// slashNew resets the history to the system prompt. The session id, cwd and
// remembered permission answers are kept.
func (s *session) slashNew(ctx actor.Context, t *turn) {
	forgotten := len(s.history) - 1
	s.history = s.history[:1:1]
	s.lastUsed = 0
	s.say(fmt.Sprintf("🆕 New session: %d message(s) forgotten.", forgotten))
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: new session, %d message(s) forgotten", s.id, forgotten))
	s.finish(ctx, t, acp.StopReasonEndTurn, "")
}

// slashCompact reports whether there is anything to compress. Summarising
// older turns with the model is not built yet, so a history with turns older
// than the kept ones is left unchanged and the failure says why.
func (s *session) slashCompact(ctx actor.Context, t *turn) {
	keep := s.rt.cfg.Context.KeepLastTurns
	n := len(s.history) - 1
	var line string
	if countTurns(s.history) <= keep {
		line = fmt.Sprintf("🗜️ nothing to compact: %d message(s), no turn older than the last %d", n, keep)
	} else {
		line = "[compact: failed, history kept: summarising older turns is not supported yet]"
	}
	s.say(line)
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: /compact — %s", s.id, line))
	s.finish(ctx, t, acp.StopReasonEndTurn, "")
}

// countTurns counts the user prompts of a history (summaries excluded).
func countTurns(h []llm.Message) int {
	n := 0
	for i := range h {
		if h[i].Role == llm.RoleUser && !h[i].Summary {
			n++
		}
	}
	return n
}
