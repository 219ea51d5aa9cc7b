package history

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTitle(t *testing.T) {
	long := strings.Repeat("é", 200)
	cases := []struct {
		name string
		h    []Message
		want string
	}{
		{"empty", nil, ""},
		{"system only", []Message{{Role: RoleSystem, Content: "sys"}}, ""},
		{"first line trimmed", []Message{
			{Role: RoleSystem, Content: "sys"},
			{Role: RoleUser, Content: "\t fix the bug  \r\nmore text"},
			{Role: RoleUser, Content: "second"},
		}, "fix the bug"},
		{"summary skipped", []Message{
			{Role: RoleUser, Summary: true, Content: "summary of before"},
			{Role: RoleAssistant, Content: "answer"},
			{Role: RoleUser, Content: "after compact"},
		}, "after compact"},
		{"empty text skipped", []Message{
			{Role: RoleUser, Content: "  \n "},
			{Role: RoleUser, Content: "real"},
		}, "real"},
		{"cut to 120 runes", []Message{{Role: RoleUser, Content: long}}, strings.Repeat("é", TitleMax-1) + "…"},
		{"exactly 120 kept", []Message{{Role: RoleUser, Content: long[:2*TitleMax]}}, long[:2*TitleMax]},
		{"no space before ellipsis", []Message{{Role: RoleUser, Content: strings.Repeat("a", 118) + " bcdef"}}, strings.Repeat("a", 118) + "…"},
	}
	for _, c := range cases {
		got := Title(c.h)
		if got != c.want {
			t.Errorf("%s: Title = %q, want %q", c.name, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > TitleMax {
			t.Errorf("%s: title has %d runes", c.name, n)
		}
	}
}

func TestAnswerTo(t *testing.T) {
	h := []Message{
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a"}, {ID: "b"}}},
		{Role: RoleTool, ToolCallID: "b", Content: "B"},
		{Role: RoleTool, ToolCallID: "a", Content: "A"},
		{Role: RoleUser, Content: "next"},
		{Role: RoleTool, ToolCallID: "c", Content: "C"},
	}
	if m := AnswerTo(h[1:], "a"); m == nil || m.Content != "A" {
		t.Errorf("a: %+v", m)
	}
	if m := AnswerTo(h[1:], "c"); m != nil {
		t.Errorf("c is after a new prompt, yet answered by %+v", m)
	}
	if m := AnswerTo(nil, "a"); m != nil {
		t.Errorf("nothing after: %+v", m)
	}
}
