package history

import (
	"strings"
	"testing"
)

// conversation is a system prompt of 96 bytes (100 counted) and turns of a
// question and an answer of 96 bytes each.
func conversation(turns int) []Message {
	body := strings.Repeat("x", 96)
	h := []Message{{Role: RoleSystem, Content: body}}
	for range turns {
		h = append(h, Message{Role: RoleUser, Content: body}, Message{Role: RoleAssistant, Content: body})
	}
	return h
}

func TestChars(t *testing.T) {
	m := Message{Content: "abcd", Images: []Image{{}, {}}, ToolCalls: []ToolCall{{Name: "bash", Arguments: `{"a":1}`}}}
	if got, want := Chars(&m), 4+4+2*4*ImageTokens+4+7; got != want {
		t.Errorf("Chars = %d, want %d", got, want)
	}
	if got, want := ContentChars(&m), 4+2*4*ImageTokens+4+7; got != want {
		t.Errorf("ContentChars = %d, want %d (Chars without the message's 4)", got, want)
	}
	if got := Estimate(conversation(2)); got != 5*100/4 {
		t.Errorf("Estimate = %d, want 125", got)
	}
}

func TestFit(t *testing.T) {
	h := conversation(5) // 11 messages, 1,100 bytes
	cases := []struct {
		name      string
		turnStart int
		limit     int
		wantLen   int
		wantLeft  int
		wantFirst string // the start of the first message after the system prompt
		wantErr   string
	}{
		{"no cap", 9, 0, 11, 0, "xxx", ""},
		{"all fits", 9, 1100, 11, 0, "xxx", ""},
		// 700 bytes: the system prompt and three turns (600) leave room
		// for the marker (about 200 bytes) only after two turns.
		{"oldest turns left out", 9, 700, 5, 6, "[6 earlier messages", ""},
		// The current turn alone: its question, then its newest model call.
		{"only the current turn", 9, 450, 3, 8, "xxx", ""},
		{"not even that", 9, 150, 0, 0, "", "no longer fits the model's context window of 99 tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h[1].Content
			msgs, left, err := Fit(h, c.turnStart, c.limit, 99)
			if c.wantErr != "" {
				if !strings.Contains(err, c.wantErr) || msgs != nil {
					t.Fatalf("err %q, %d messages; want %q", err, len(msgs), c.wantErr)
				}
				return
			}
			if err != "" || len(msgs) != c.wantLen || left != c.wantLeft {
				t.Fatalf("%d messages, %d left, err %q; want %d, %d", len(msgs), left, err, c.wantLen, c.wantLeft)
			}
			if msgs[0].Role != RoleSystem || !strings.HasPrefix(msgs[1].Content, c.wantFirst) {
				t.Errorf("first messages %q, %q", msgs[0].Content, msgs[1].Content)
			}
			if c.limit > 0 {
				n := 0
				for i := range msgs {
					n += Chars(&msgs[i])
				}
				if n > c.limit {
					t.Errorf("%d bytes sent, limit %d", n, c.limit)
				}
			}
			if h[1].Content != before || h[len(h)-2].Content != before {
				t.Error("Fit changed the history")
			}
		})
	}
	// A whole history's view cannot grow into the history's array.
	msgs, _, _ := Fit(h, 9, 0, 99)
	if cap(msgs) != len(msgs) {
		t.Errorf("the view has room to append into the history: cap %d, len %d", cap(msgs), len(msgs))
	}
}

func TestFitKeepsTheQuestionWithItsNewestCalls(t *testing.T) {
	body := strings.Repeat("y", 96)
	h := append(conversation(1),
		Message{Role: RoleUser, Content: "the question"},
		Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "1", Name: "bash"}}},
		Message{Role: RoleTool, ToolCallID: "1", Content: body},
		Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "2", Name: "bash"}}},
		Message{Role: RoleTool, ToolCallID: "2", Content: body},
	)
	msgs, left, err := Fit(h, 3, 400, 99)
	if err != "" {
		t.Fatal(err)
	}
	if len(msgs) != 4 || left != 4 || !strings.HasPrefix(msgs[1].Content, "the question\n\n[Earlier model calls") ||
		msgs[2].ToolCalls[0].ID != "2" || msgs[3].ToolCallID != "2" {
		t.Fatalf("%d left, messages %+v", left, msgs)
	}
	if h[3].Content != "the question" {
		t.Error("Fit changed the question in the history")
	}
}

func TestTooLarge(t *testing.T) {
	system := Message{Role: RoleSystem, Content: strings.Repeat("s", 396)} // 400
	small := Message{Role: RoleUser, Content: "hi"}
	big := Message{Role: RoleUser, Content: strings.Repeat("b", 2000)}
	if why := TooLarge(&system, &big, 0, 0, 1000); why != "" {
		t.Errorf("no cap, yet: %s", why)
	}
	if why := TooLarge(&system, &small, 100, 1000, 1000); why != "" {
		t.Errorf("fits, yet: %s", why)
	}
	if why := TooLarge(&system, &big, 100, 1000, 1000); !strings.Contains(why, "the prompt is too large for the model: about 501 tokens") {
		t.Errorf("big prompt: %q", why)
	}
	if why := TooLarge(&system, &small, 100, 300, 150); !strings.Contains(why, "too small for mm") {
		t.Errorf("tiny window: %q", why)
	}
}
