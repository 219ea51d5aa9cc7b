package history

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"
)

// Replay renders a history as the notifications of a session/load (the
// seed's replay, SPEC section 7), each with meta as its _meta: a user
// message as user_message_chunks (its text, then each image), a /compact
// summary as an agent_message_chunk marked 🗜️, an assistant message as its
// text then a tool_call per call (completed or failed with the output
// recorded, failed with no content when it was never answered), and the
// plan last when there is one. The system prompt (h[0]) is not replayed.
// A text longer than ReplayChunkBytes goes as several chunks, cut at
// character boundaries, so that a client that bounds a line (acp-go-sdk
// reads 10 MiB) reads the replay of an answer it read live in pieces.
// live gives a call recorded without its title the title and kind its
// tool would have shown.
func Replay(h []Message, plan []PlanEntry, meta map[string]any, live func(ToolCall) (string, acp.ToolKind)) []acp.SessionUpdate {
	var out []acp.SessionUpdate
	for i := 1; i < len(h); i++ {
		m := &h[i]
		switch m.Role {
		case RoleUser:
			if m.Summary {
				out = append(out, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Meta: meta, Content: acp.TextBlock("🗜️ " + m.Content)}})
				continue
			}
			if m.Content != "" || len(m.Images) == 0 {
				for _, part := range chunks(m.Content) {
					out = append(out, acp.SessionUpdate{UserMessageChunk: &acp.SessionUpdateUserMessageChunk{Meta: meta, Content: acp.TextBlock(part)}})
				}
			}
			for _, im := range m.Images {
				out = append(out, acp.SessionUpdate{UserMessageChunk: &acp.SessionUpdateUserMessageChunk{Meta: meta, Content: acp.ImageBlock(im.Data, im.MIMEType)}})
			}
		case RoleAssistant:
			if m.Content != "" {
				for _, part := range chunks(m.Content) {
					out = append(out, acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Meta: meta, Content: acp.TextBlock(part)}})
				}
			}
			for _, c := range m.ToolCalls {
				out = append(out, acp.SessionUpdate{ToolCall: replayCall(c, AnswerTo(h[i+1:], c.ID), meta, live)})
			}
		}
	}
	if len(plan) > 0 {
		out = append(out, PlanUpdate(plan, meta))
	}
	return out
}

// ReplayChunkBytes bounds the text of one replayed chunk.
const ReplayChunkBytes = 1 << 20

// chunks cuts s into pieces of at most ReplayChunkBytes, each ending on a
// character boundary; s itself when it is short (or empty).
func chunks(s string) []string {
	if len(s) <= ReplayChunkBytes {
		return []string{s}
	}
	var out []string
	for len(s) > ReplayChunkBytes {
		n := ReplayChunkBytes
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// ToolNames maps the id each stored call's tool_call has in a replay (its
// answer's CallRef, else its own id) to its tool's name, which a live
// tool_call carries (ACP's unstable ToolCall.name, which the SDK's type
// does not hold).
func ToolNames(h []Message) map[acp.ToolCallId]string {
	names := map[acp.ToolCallId]string{}
	for i := range h {
		for _, c := range h[i].ToolCalls {
			id := c.ID
			if a := AnswerTo(h[i+1:], c.ID); a != nil && a.CallRef != "" {
				id = a.CallRef
			}
			names[acp.ToolCallId(id)] = c.Name
		}
	}
	return names
}

// PlanUpdate is a plan as ACP's plan update, with meta as its _meta.
func PlanUpdate(p []PlanEntry, meta map[string]any) acp.SessionUpdate {
	entries := make([]acp.PlanEntry, len(p))
	for i, e := range p {
		entries[i] = acp.PlanEntry{Content: e.Content, Priority: acp.PlanEntryPriority(e.Priority), Status: acp.PlanEntryStatus(e.Status)}
	}
	return acp.SessionUpdate{Plan: &acp.SessionUpdatePlan{Meta: meta, Entries: entries}}
}

// replayCall is the tool_call of a stored call: completed (or failed) with
// its output when it was answered, failed with no content when it was not.
func replayCall(c ToolCall, answer *Message, meta map[string]any, live func(ToolCall) (string, acp.ToolKind)) *acp.SessionUpdateToolCall {
	tc := &acp.SessionUpdateToolCall{Meta: meta, ToolCallId: acp.ToolCallId(c.ID), Status: acp.ToolCallStatusFailed}
	if answer == nil {
		tc.Title, tc.Kind = live(c)
		tc.RawInput = RawArgs(c.Arguments)
		return tc
	}
	if answer.CallRef != "" {
		tc.ToolCallId = acp.ToolCallId(answer.CallRef)
	}
	tc.Title, tc.Kind = answer.Title, acp.ToolKind(answer.Kind)
	if tc.Title == "" {
		tc.Title, tc.Kind = live(c)
	}
	tc.RawInput = answer.RawInput
	if tc.RawInput == nil {
		tc.RawInput = RawArgs(c.Arguments)
	}
	if !answer.Failed {
		tc.Status = acp.ToolCallStatusCompleted
	}
	tc.RawOutput = map[string]any{"output": answer.Content}
	tc.Content = []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(answer.Content))}
	return tc
}

// RawArgs is a call's arguments as a tool_call's rawInput: the object the
// model wrote, or, when they do not decode as one, {"arguments": the text}.
func RawArgs(s string) map[string]any {
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		return map[string]any{"arguments": s}
	}
	return m
}
