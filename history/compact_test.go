package history

import (
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	h := []Message{
		{Role: RoleSystem},
		{Role: RoleUser, Summary: true}, // a summary starts no turn
		{Role: RoleUser}, {Role: RoleAssistant},
		{Role: RoleUser}, {Role: RoleAssistant}, {Role: RoleTool},
		{Role: RoleUser}, {Role: RoleAssistant},
	}
	cases := []struct{ keep, older, cut int }{
		{0, 8, 9}, {1, 6, 7}, {2, 3, 4}, {3, 0, 9}, {4, 0, 9},
	}
	for _, c := range cases {
		if older, cut := Split(h, c.keep); older != c.older || cut != c.cut {
			t.Errorf("keep %d: %d, %d; want %d, %d", c.keep, older, cut, c.older, c.cut)
		}
	}
}

func TestCompacted(t *testing.T) {
	h := []Message{{Role: RoleSystem, Content: "s"}, {Role: RoleUser, Content: "1"}, {Role: RoleAssistant}, {Role: RoleUser, Content: "2"}}
	got := Compacted(h, 3, "sum")
	if len(got) != 3 || got[0].Content != "s" || !got[1].Summary || got[1].Role != RoleUser || got[1].Content != "sum" || got[2].Content != "2" {
		t.Fatalf("%+v", got)
	}
	got[2].Content = "changed"
	if h[3].Content != "2" {
		t.Error("Compacted shares its array with the history")
	}
}

func TestTranscript(t *testing.T) {
	msgs := []Message{
		{Role: RoleUser, Summary: true, Content: "before"},
		{Role: RoleUser, Content: "fix it"},
		{Role: RoleAssistant, Content: "looking", ToolCalls: []ToolCall{{Name: "bash", Arguments: `{"command":"ls"}`}}},
		{Role: RoleTool, Name: "bash", Content: strings.Repeat("o", 2500)},
	}
	all := Transcript(msgs, 0)
	for _, want := range []string{"EARLIER SUMMARY:\nbefore\n\n", "USER:\nfix it\n\n", "ASSISTANT:\nlooking\nTOOL CALL bash {\"command\":\"ls\"}\n\n", "TOOL RESULT (bash):\n", "\n[… 500 more bytes]"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in %q", want, all)
		}
	}
	cut := Transcript(msgs, 2300)
	if !strings.HasPrefix(cut, "[the 3 oldest messages are left out") || strings.Contains(cut, "fix it") || len(cut) > 2300 {
		t.Errorf("limited: %d bytes, %q…", len(cut), cut[:80])
	}
}
