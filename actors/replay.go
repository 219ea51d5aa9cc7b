package actors

import (
	"encoding/json"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// ProvenanceKey is the _meta key of a session's provenance (SPEC section 7).
const ProvenanceKey = "mm.sessionProvenance"

// ProvenanceMeta is the _meta carried by session responses and replays.
func ProvenanceMeta(p store.Provenance) map[string]any {
	return map[string]any{ProvenanceKey: p}
}

// onReplay sends the history as the seed's replay notifications, then
// available_commands_update, and answers behind them. No tool runs during a
// replay.
//
// With a store that fences (Postgres), the session first checks that its
// copy is still the stored one (store.Writer.Check): a load never replays
// a copy older than what another activation saved meanwhile.
func (s *session) onReplay(ctx actor.Context, m *Replay) {
	if s.writer != nil && s.writer.Fences() && !s.fenced {
		s.checkHolds(ctx, 0, m)
		return
	}
	s.replay(m)
}

func (s *session) replay(m *Replay) {
	meta := ProvenanceMeta(s.prov)
	names := history.ToolNames(s.history)
	for _, u := range history.Replay(s.history, s.plan, meta, liveTitle) {
		if u.ToolCall != nil && names[u.ToolCall.ToolCallId] != "" {
			s.out.UpdateRaw(s.id, toolCallUpdate(u, names[u.ToolCall.ToolCallId]))
			continue
		}
		s.out.Update(s.id, u)
	}
	s.announced = true
	s.tellNotice()
	s.out.Update(s.id, acp.SessionUpdate{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{
		Meta: meta, AvailableCommands: Commands(s.skills, s.agents != nil),
	}})
	o := s.outcome()
	o.Messages = len(s.history) - 1
	s.rt.log.Info(fmt.Sprintf("[acp] session %s loaded from %s: %d message(s) replayed", s.id, s.rt.cfg.Sessions.Dir, o.Messages))
	s.answer(m.Reply, o)
}

// onResume answers with the session as it is, then announces its commands:
// the response names no session, so the commands may follow it at once.
func (s *session) onResume(m *Resume) {
	s.rt.log.Info(fmt.Sprintf("[acp] session %s resumed (%d message(s))", s.id, len(s.history)-1))
	s.answer(m.Reply, s.outcome())
	s.announce()
}

// outcome describes the session for a request's answer.
func (s *session) outcome() *Outcome {
	return &Outcome{Mode: s.mode, Model: s.modelID, Provenance: s.prov, Sandbox: string(s.sandboxMode), Network: s.network}
}

// liveTitle gives a stored call without a recorded answer the title and
// kind the live tool would have shown, without touching any file.
func liveTitle(c history.ToolCall) (string, acp.ToolKind) {
	kind := acp.ToolKindExecute
	if t, ok := tools.Lookup(c.Name); ok {
		kind = toolKind(t.Kind())
	}
	var args map[string]any
	_ = json.Unmarshal([]byte(c.Arguments), &args)
	for _, key := range []string{"command", "path", "name", "url"} {
		if v, ok := args[key].(string); ok {
			return fmt.Sprintf("%s: %s", c.Name, v), kind
		}
	}
	return c.Name, kind
}

// Modes are the session modes: ask before mutating tools, or not.
const (
	ModeAsk  = "ask"
	ModeYolo = "yolo"
)

func (s *session) onSetMode(ctx actor.Context, m *SetMode) {
	if m.Mode != ModeAsk && m.Mode != ModeYolo {
		s.answer(m.Reply, &Outcome{Err: fmt.Sprintf("unknown mode %q (ask, yolo)", m.Mode)})
		return
	}
	s.mode = m.Mode
	s.sys.dirty = true // the environment block says whether calls ask
	s.out.Update(s.id, acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: acp.SessionModeId(m.Mode)}})
	s.save(ctx, false)
	s.answer(m.Reply, s.outcome())
}

func (s *session) onSetModel(ctx actor.Context, m *SetModel) {
	if _, ok := s.rt.models[m.ID]; !ok {
		s.answer(m.Reply, &Outcome{Err: fmt.Sprintf("unknown model %q", m.ID)})
		return
	}
	s.modelID = m.ID
	s.sys.fixed = false // the prompt's size follows the new model's window
	s.rt.warm(m.ID)
	s.save(ctx, false)
	s.answer(m.Reply, s.outcome())
}
