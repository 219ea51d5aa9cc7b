package protocol

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"
)

// TestFastIsMarshal: the updates and answers written byte by byte
// (fast.go) are the SDK's bytes for the same values, over many random
// ones: texts with every character encoding/json escapes, ids or none,
// counts of every size, optional counts set or not.
func TestFastIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", " ", "\"", "\\", "<", ">", "&", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f",
		"é", "日本", "🙂", "\u2028", "\u2029", "\xff", "\xc3", "\ufffd", "{", "}", ","}
	text := func() string {
		var b strings.Builder
		for range r.IntN(20) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	num := func() int {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return r.IntN(100)
		case 2:
			return r.Int() - r.Int()
		}
		return -r.IntN(1 << 20)
	}
	opt := func() *int {
		if r.IntN(2) == 0 {
			return nil
		}
		n := num()
		return &n
	}
	for i := range 5000 {
		sid := text()
		var u acp.SessionUpdate
		var id *string
		if r.IntN(2) == 0 {
			s := text()
			id = &s
		}
		switch i % 3 {
		case 0:
			u.AgentMessageChunk = &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(text()), MessageId: id}
		case 1:
			u.AgentThoughtChunk = &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock(text()), MessageId: id}
		case 2:
			u.UsageUpdate = &acp.SessionUsageUpdate{Used: num(), Size: num()}
		}
		n, ok := notification(sid, &u).(sessionNotification)
		if !ok {
			t.Fatalf("%+v is not a hot update", u)
		}
		got, ok := n.appendJSON(nil)
		if !ok {
			t.Fatalf("%+v not written", u)
		}
		want, err := json.Marshal(acp.SessionNotification{SessionId: acp.SessionId(sid), Update: u})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("update\n got %s\nwant %s", got, want)
		}
		// What a node sends across: the update alone.
		if _, hot := hotUpdate(&u); !hot {
			t.Fatalf("%+v is not hot alone", u)
		}
		if got, err = MarshalUpdate(&u); err != nil {
			t.Fatal(err)
		}
		if want, err = json.Marshal(u); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("update alone\n got %s\nwant %s", got, want)
		}

		res := acp.PromptResponse{StopReason: acp.StopReason(text())}
		if r.IntN(4) > 0 {
			res.Usage = &acp.Usage{InputTokens: num(), OutputTokens: num(), TotalTokens: num(),
				CachedReadTokens: opt(), CachedWriteTokens: opt(), ThoughtTokens: opt()}
		}
		got, ok = appendResult(nil, res, nil)
		if !ok {
			t.Fatalf("%+v not written", res)
		}
		if want, err = json.Marshal(res); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("answer\n got %s\nwant %s", got, want)
		}
		if got, err = MarshalAnswer(res); err != nil || string(got) != string(want) {
			t.Fatalf("answer across\n got %s\nwant %s", got, want)
		}
	}
	// What is not written here is said so, and encoded as before.
	if _, ok := appendResult(nil, acp.PromptResponse{StopReason: "end_turn", Meta: map[string]any{"a": 1}}, nil); ok {
		t.Error("an answer with _meta was written here")
	}
	if _, ok := (sessionNotification{Update: 3}).appendJSON(nil); ok {
		t.Error("an update of another shape was written here")
	}
	other := acp.SessionUpdate{ToolCall: &acp.SessionUpdateToolCall{ToolCallId: "c", Title: "t"}}
	if _, hot := hotUpdate(&other); hot {
		t.Error("a tool call is taken for a hot update")
	}
	got, err := MarshalUpdate(&other)
	want, _ := json.Marshal(other)
	if err != nil || string(got) != string(want) {
		t.Errorf("a tool call across: %s, want %s", got, want)
	}
}
