package history

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"
)

func TestReplay(t *testing.T) {
	h := []Message{
		{Role: RoleSystem, Content: "never replayed"},
		{Role: RoleUser, Summary: true, Content: "what came before"},
		{Role: RoleUser, Content: "look", Images: []Image{{MIMEType: "image/png", Data: "iVBO"}}},
		{Role: RoleAssistant, Content: "running", ToolCalls: []ToolCall{
			{ID: "fc_1", Name: "bash", Arguments: `{"command":"ls"}`},
			{ID: "fc_2", Name: "read_file", Arguments: `not json`},
			{ID: "fc_3", Name: "bash", Arguments: `{"command":"false"}`},
		}},
		{Role: RoleTool, ToolCallID: "fc_1", Content: "a.go", CallRef: "call_1", Title: "bash: ls", Kind: "execute", RawInput: map[string]any{"command": "ls"}},
		{Role: RoleTool, ToolCallID: "fc_3", Content: "exit 1", Failed: true},
		{Role: RoleUser, Content: ""}, // an empty prompt still shows
		{Role: RoleTool, ToolCallID: "fc_2", Content: "too late: a new prompt came first"},
	}
	meta := map[string]any{"k": "v"}
	live := func(c ToolCall) (string, acp.ToolKind) { return "live " + c.Name, acp.ToolKindRead }
	got := Replay(h, []PlanEntry{{Content: "step", Priority: "high", Status: "pending"}}, meta, live)
	// Each call's tool name, under the id its tool_call is shown with.
	names := ToolNames(h)
	if len(names) != 3 || names["call_1"] != "bash" || names["fc_2"] != "read_file" || names["fc_3"] != "bash" {
		t.Errorf("ToolNames: %v", names)
	}

	type want struct{ kind, text, id, status, title string }
	wants := []want{
		{"agent", "🗜️ what came before", "", "", ""},
		{"user", "look", "", "", ""},
		{"user-image", "", "", "", ""},
		{"agent", "running", "", "", ""},
		{"call", "a.go", "call_1", "completed", "bash: ls"},
		{"call", "", "fc_2", "failed", "live read_file"},
		{"call", "exit 1", "fc_3", "failed", "live bash"},
		{"user", "", "", "", ""},
		{"plan", "step", "", "", ""},
	}
	if len(got) != len(wants) {
		b, _ := json.Marshal(got)
		t.Fatalf("%d updates, want %d: %s", len(got), len(wants), b)
	}
	for i, w := range wants {
		u := got[i]
		switch w.kind {
		case "agent":
			if u.AgentMessageChunk == nil || u.AgentMessageChunk.Content.Text.Text != w.text || u.AgentMessageChunk.Meta["k"] != "v" {
				t.Errorf("%d: want agent chunk %q, got %+v", i, w.text, u)
			}
		case "user":
			if u.UserMessageChunk == nil || u.UserMessageChunk.Content.Text == nil || u.UserMessageChunk.Content.Text.Text != w.text {
				t.Errorf("%d: want user chunk %q, got %+v", i, w.text, u)
			}
		case "user-image":
			if u.UserMessageChunk == nil || u.UserMessageChunk.Content.Image == nil || u.UserMessageChunk.Content.Image.Data != "iVBO" {
				t.Errorf("%d: want the image, got %+v", i, u)
			}
		case "call":
			c := u.ToolCall
			if c == nil || string(c.ToolCallId) != w.id || string(c.Status) != w.status || c.Title != w.title {
				t.Errorf("%d: want call %s %s %q, got %+v", i, w.id, w.status, w.title, c)
				continue
			}
			if w.text == "" && (c.Content != nil || c.RawOutput != nil) {
				t.Errorf("%d: an unanswered call shows output: %+v", i, c)
			}
			if w.text != "" && (len(c.Content) != 1 || c.Content[0].Content.Content.Text.Text != w.text) {
				t.Errorf("%d: output %+v, want %q", i, c.Content, w.text)
			}
		case "plan":
			if u.Plan == nil || len(u.Plan.Entries) != 1 || u.Plan.Entries[0].Content != "step" || u.Plan.Entries[0].Priority != "high" {
				t.Errorf("%d: want the plan, got %+v", i, u)
			}
		}
	}
	if in := got[5].ToolCall.RawInput; in == nil || in.(map[string]any)["arguments"] != "not json" {
		t.Errorf("undecodable arguments shown as %v", in)
	}
}

// TestReplayCutsLongText: an answer longer than ReplayChunkBytes is
// replayed as chunks no longer than it, cut between characters, whose
// texts make the answer again (a 12 MB answer was one line a client
// bounded at 10 MiB could not read).
func TestReplayCutsLongText(t *testing.T) {
	long := strings.Repeat("héllo wörld — ", 3*ReplayChunkBytes/10)
	h := []Message{{Role: RoleSystem}, {Role: RoleUser, Content: "big"}, {Role: RoleAssistant, Content: long}}
	got := Replay(h, nil, nil, nil)
	text := ""
	for _, u := range got[1:] {
		c := u.AgentMessageChunk
		if c == nil || c.Content.Text == nil {
			t.Fatalf("not an agent text chunk: %+v", u)
		}
		if n := len(c.Content.Text.Text); n > ReplayChunkBytes || !utf8.ValidString(c.Content.Text.Text) {
			t.Errorf("a chunk of %d bytes, valid UTF-8 %t", n, utf8.ValidString(c.Content.Text.Text))
		}
		text += c.Content.Text.Text
	}
	if len(got) < 5 || text != long {
		t.Errorf("%d updates; the chunks make the answer again: %t", len(got), text == long)
	}
}
