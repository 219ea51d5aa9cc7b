package actors

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/sjson"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/mcpclient"
	"github.com/mm-agent/mm/tools"
)

// The tool phase of a turn: the calls of one model answer run one at a time,
// each in its own worker actor, in the order the model gave them.

// nextTool runs the next pending call, or asks the model again when there is
// none left (unless the turn has used up its model calls).
func (s *session) nextTool(ctx actor.Context, t *turn) {
	if len(t.pending) == 0 {
		if t.calls >= s.rt.cfg.Turns.MaxModelCalls {
			// Only with a budget of one call: a larger one ends with a
			// call without tools (callModel), which runs none.
			s.finish(ctx, t, acp.StopReasonMaxTurnRequests, "")
			return
		}
		s.callModel(ctx, t)
		return
	}
	t.tool = t.pending[0]
	t.pending = t.pending[1:]
	t.announced = false
	if t.tool.Name == "bash" {
		s.ranCommands = true
	}
	// The loop detector counts the same call made again and again.
	if key := callKey(t.tool); key == t.lastCall {
		t.repeats++
	} else {
		t.lastCall, t.repeats = key, 1
	}
	callID := fmt.Sprintf("call_%d", s.rt.nextCall.Add(1))
	confine := s.confine()
	w := &toolWorker{
		rt:      s.rt,
		client:  s.client,
		session: s.id,
		turn:    t.id,
		callID:  callID,
		name:    t.tool.Name,
		args:    t.tool.Arguments,
		env: tools.Env{Cwd: s.cwd, Roots: s.roots, Offered: s.offered(), Output: s.output(callID), BashTimeout: s.rt.cfg.Tools.Bash.Timeout, SessionID: s.id,
			Plan: s.plan, SkillDirs: s.skillDirs, HTTP: s.rt.http, Fetch: s.rt.fetchLimits(), Confine: confine, Sandbox: s.policy(), Foreign: s.foreign()},
		hookConfine: s.hookConfine(confine),
		policy:      toolPolicy{yolo: s.mode == ModeYolo, always: s.allowAlways[t.tool.Name], never: s.never[t.tool.Name]},
		repeat:      t.repeats,
		agents:      s.agents,
		budget:      s.budget,
		nested:      s.nested(),
	}
	if s.mcp != nil {
		w.env.MCP = s.mcp
	}
	if s.lsp != nil {
		w.env.LSP = s.lsp
	}
	s.spawn(ctx, t, callID, w)
}

// callKey identifies a call by its tool and its arguments, whatever their
// spacing or key order.
func callKey(c history.ToolCall) string {
	var v any
	if json.Unmarshal([]byte(c.Arguments), &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			return c.Name + " " + string(b)
		}
	}
	return c.Name + " " + c.Arguments
}

func (s *session) current(turnID uint64, callID string) (*turn, *actor.PID) {
	t := s.cur
	if t == nil || t.id != turnID {
		return nil, nil
	}
	pid := t.live[callID]
	if pid == nil {
		return nil, nil
	}
	return t, pid
}

func (s *session) onToolPrepared(ctx actor.Context, m *toolPrepared) {
	t, pid := s.current(m.Turn, m.CallID)
	if t == nil {
		return
	}
	t.toolTitle, t.toolKind, t.toolInput = m.Title, m.Kind, m.RawInput
	if t.cancelled {
		// Never announced, so never mentioned: its end is not reported
		// either.
		return
	}
	t.announced = true
	s.out.UpdateRaw(s.id, toolCallUpdate(acp.SessionUpdate{ToolCall: &acp.SessionUpdateToolCall{
		ToolCallId: acp.ToolCallId(m.CallID),
		Title:      m.Title,
		Kind:       m.Kind,
		Status:     acp.ToolCallStatusPending,
		RawInput:   m.RawInput,
		Locations:  locations(m.Locations),
	}}, m.Name))
	if m.Err == "" {
		// The go-ahead reaches the worker after the pending tool_call is
		// written, so a permission request never precedes its tool call.
		s.out.Deliver(s.id, pid, &toolProceed{})
	}
}

// onToolAsking gives the turn's slot back while a person answers: the slot
// is for the model and the tools, and another session's turn may use it
// meanwhile.
func (s *session) onToolAsking(ctx actor.Context, m *toolAsking) {
	t, _ := s.current(m.Turn, m.CallID)
	if t == nil || t.cancelled || t.state != turnRunning {
		return
	}
	ctx.Send(s.rt.turns, &releaseSlot{Turn: t.id})
	t.state = turnAsking
}

// onToolAnswered queues the turn for a slot again, first come first
// served; the worker goes on once it is granted (onSlot).
func (s *session) onToolAnswered(ctx actor.Context, m *toolAnswered) {
	t, pid := s.current(m.Turn, m.CallID)
	if t == nil || t.cancelled || t.state != turnAsking {
		return
	}
	t.resume = pid
	s.acquire(ctx, t)
}

func (s *session) onToolStarted(m *toolStarted) {
	if t, _ := s.current(m.Turn, m.CallID); t == nil || t.cancelled || !t.announced {
		return
	}
	s.out.Update(s.id, acp.SessionUpdate{ToolCallUpdate: &acp.SessionToolCallUpdate{
		ToolCallId: acp.ToolCallId(m.CallID),
		Status:     acp.Ptr(acp.ToolCallStatusInProgress),
	}})
}

// onToolProgress shows a running command's output so far in its tool call.
func (s *session) onToolProgress(m *toolProgress) {
	if t, _ := s.current(m.Turn, m.CallID); t == nil || t.cancelled || !t.announced {
		s.budget.Give(m.Cost)
		return
	}
	s.out.Stream(s.id, acp.SessionUpdate{ToolCallUpdate: &acp.SessionToolCallUpdate{
		ToolCallId: acp.ToolCallId(m.CallID),
		Content:    []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(m.Output))},
	}}, s.budget, m.Cost)
}

func (s *session) onToolRemember(m *toolRemember) {
	if s.allowAlways == nil {
		s.allowAlways, s.never = map[string]bool{}, map[string]bool{}
	}
	s.allowAlways[m.Tool] = m.Allow
	s.never[m.Tool] = !m.Allow
}

func (s *session) onToolFinished(ctx actor.Context, m *toolFinished) {
	t, _ := s.current(m.Turn, m.CallID)
	if t == nil {
		return
	}
	if m.Denied {
		t.toolTitle += " — denied by a hook"
	}
	if m.Failed {
		s.rt.metrics.ToolCall(m.Tool, string(acp.ToolCallStatusFailed))
	} else {
		s.rt.metrics.ToolCall(m.Tool, string(acp.ToolCallStatusCompleted))
	}
	if t.announced {
		status := acp.ToolCallStatusCompleted
		if m.Failed {
			status = acp.ToolCallStatusFailed
		}
		content := []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(m.Output))}
		if m.DiffPath != "" && !m.Failed {
			content = []acp.ToolCallContent{diffContent(m.DiffPath, m.OldText, m.NewText)}
		}
		if len(m.Edits) > 0 && !m.Failed {
			content = content[:0]
			for _, e := range m.Edits {
				content = append(content, diffContent(e.Path, e.OldText, e.NewText))
			}
		}
		content = append(content, mediaContent(m.Media)...)
		u := &acp.SessionToolCallUpdate{
			ToolCallId: acp.ToolCallId(m.CallID),
			Status:     acp.Ptr(status),
			Content:    content,
			RawOutput:  map[string]any{"output": m.Output},
		}
		if m.Denied {
			u.Title = acp.Ptr(t.toolTitle)
		}
		s.out.Update(s.id, acp.SessionUpdate{ToolCallUpdate: u})
	}
	if m.Plan != nil {
		s.setPlan(m.Plan)
	}
	s.history = append(s.history, history.Message{
		Role: history.RoleTool, ToolCallID: t.tool.ID, Name: m.Tool, Content: s.withNested(m.Output, m.Instructions),
		CallRef: m.CallID, Title: t.toolTitle, Kind: string(t.toolKind), RawInput: t.toolInput, Failed: m.Failed,
	})
	if m.Ran {
		switch m.Tool {
		case "bash":
			t.commands++
		case "read_skill":
			t.skills++
			t.skillNames = append(t.skillNames, strings.TrimPrefix(strings.TrimPrefix(t.toolTitle, "read_skill: "), "$"))
		default:
			t.fileOps++
		}
	}
	if s.settle(ctx, t, m.CallID) {
		return
	}
	s.nextTool(ctx, t)
}

// answerPending gives every tool call the model asked for and that will not
// run a result, so the history stays one the model server accepts.
func (s *session) answerPending(t *turn, text string) {
	for _, c := range t.pending {
		s.history = append(s.history, history.Message{Role: history.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: text})
	}
	t.pending = nil
}

// toolDefs describes the built-in tools to the model.
func toolDefs() []llm.ToolDef {
	var out []llm.ToolDef
	for _, t := range tools.Builtin() {
		out = append(out, llm.ToolDef{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
	}
	return out
}

// offered are the names of the built-in tools that can work in the
// session (tools.Offered): ask_agent with agents, lsp with language
// servers, read_skill with skills in its catalog.
func (s *session) offered() []string {
	has := tools.Has{Agents: s.agents != nil, LSP: s.lsp != nil, Skills: s.skills != nil && len(s.skills.Names()) > 0}
	var names []string
	for _, t := range tools.Offered(has) {
		names = append(names, t.Name())
	}
	return names
}

// useTools makes the session's tool list what it can use now: the
// built-in tools offered, then its MCP servers' tools. It is called when
// the session starts, when its MCP tools change and when its skills do.
func (s *session) useTools() {
	offered := s.offered()
	var mcp []mcpclient.Tool
	if s.mcp != nil {
		mcp = s.mcp.Tools()
	}
	defs := make([]llm.ToolDef, 0, len(offered)+len(mcp))
	for _, d := range s.rt.toolDefs {
		if slices.Contains(offered, d.Name) {
			defs = append(defs, d)
		}
	}
	for _, t := range mcp {
		defs = append(defs, llm.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Schema})
	}
	s.toolDefs = defs
}

// mediaContent shows the images and resources a tool returned.
func mediaContent(media []tools.Media) []acp.ToolCallContent {
	var out []acp.ToolCallContent
	for _, m := range media {
		switch {
		case m.Type == "image":
			out = append(out, acp.ToolContent(acp.ImageBlock(m.Data, m.MIMEType)))
		case m.Text != "":
			out = append(out, acp.ToolContent(acp.ResourceBlock(acp.EmbeddedResourceResource{
				TextResourceContents: &acp.TextResourceContents{Uri: m.URI, Text: m.Text, MimeType: mimePtr(m.MIMEType)}})))
		default:
			out = append(out, acp.ToolContent(acp.ResourceBlock(acp.EmbeddedResourceResource{
				BlobResourceContents: &acp.BlobResourceContents{Uri: m.URI, Blob: m.Data, MimeType: mimePtr(m.MIMEType)}})))
		}
	}
	return out
}

func mimePtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// toolCallUpdate is a tool_call update with its tool's name (ACP's
// unstable ToolCall.name, which the Go SDK's type does not hold yet): the
// SDK's encoding, the name added. A client that does not know the field
// ignores it.
func toolCallUpdate(u acp.SessionUpdate, name string) json.RawMessage {
	raw, err := json.Marshal(u)
	if err != nil || name == "" {
		return raw
	}
	if named, err := sjson.SetBytes(raw, "name", name); err == nil {
		return named
	}
	return raw
}
