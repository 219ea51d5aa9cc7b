package serve

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"
)

// TestParseOut: the prefix read of mm's session/update lines says what the
// full parse says, for every kind of line mm writes; a session id with an
// escape takes the full parse.
func TestParseOut(t *testing.T) {
	update, _ := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", acp.ClientMethodSessionUpdate, acp.SessionNotification{SessionId: "20261202-061500-4f2a9c1e",
		Update: acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(`{"sessionId":"x"}`)}}}})
	lines := []string{
		string(update),
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a\"b","update":{}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a\\u0062","update":{}}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}`,
		`{"jsonrpc":"2.0","id":"mm-3","method":"session/request_permission","params":{"sessionId":"s2","toolCall":{}}}`,
		`{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"Method not found"}}`,
	}
	for _, l := range lines {
		if got, want := parseOut([]byte(l)), parseOutSlow([]byte(l)); got != want {
			t.Errorf("%s:\n%+v, want %+v", l, got, want)
		}
	}
	// What mm writes (protocol's golden session) takes the prefix read.
	golden, err := os.ReadFile("../protocol/testdata/golden/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	updates := 0
	for l := range bytes.Lines(golden) {
		l = bytes.TrimSpace(l)
		if !bytes.Contains(l, []byte(`"method":"session/update"`)) {
			continue
		}
		updates++
		if !bytes.HasPrefix(l, []byte(updatePrefix)) {
			t.Errorf("mm's session/update no longer starts with the prefix the routing reads:\n%s", l)
		}
		if got, want := parseOut(l), parseOutSlow(l); got != want {
			t.Errorf("%s:\n%+v, want %+v", l, got, want)
		}
	}
	if updates == 0 {
		t.Fatal("no session/update in the golden session")
	}
}

// BenchmarkParseOut: what routing a typical streamed chunk costs, by the
// prefix read and by the full parse.
func BenchmarkParseOut(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"20261202-061500-4f2a9c1e","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + strings.Repeat("word ", 40) + `"}}}}`)
	b.Run("prefix", func(b *testing.B) {
		for b.Loop() {
			_ = parseOut(line)
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			_ = parseOutSlow(line)
		}
	})
}

// BenchmarkParseMessage: reading a client's prompt frame and the members
// routing asks of it.
func BenchmarkParseMessage(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":12,"method":"session/prompt","params":{"sessionId":"20261202-061500-4f2a9c1e","prompt":[{"type":"text","text":"` + strings.Repeat("word ", 40) + `"}]}}`)
	for b.Loop() {
		m, _ := parseMessage(frame)
		_, _ = m.sessionID()
		_ = m.isRequest()
		_ = m.isInitialize()
		_, _ = idKey(m.id())
	}
}

// compact, in place, makes what json.Compact makes of valid JSON; a
// pretty-printed text that is not JSON stays refused, whatever its white
// space parted.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{
		"{\n\t\"jsonrpc\": \"2.0\",\n\t\"id\": 6,\n\t\"params\": {\"a\": \" x \\\" \\n y\", \"b\": [1, 2]}\n}",
		"{\"a\":\n\"\\\\\"}", "[\n1,\r\n\t2 ]", "tru\ne", "1\n2", "{\"a\":\n1 2}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want bytes.Buffer
		wantErr := json.Compact(&want, bytes.TrimSpace(b))
		m, err := parseMessage(bytes.Clone(b))
		if bytes.IndexByte(bytes.TrimSpace(b), '\n') < 0 {
			return // kept as it is
		}
		if wantErr != nil {
			if err == nil {
				t.Fatalf("%q: parsed as %q; json.Compact: %v", b, m.Line, wantErr)
			}
			return
		}
		if err == nil && !bytes.Equal(m.Line, want.Bytes()) {
			t.Fatalf("%q: %q, json.Compact makes %q", b, m.Line, want.Bytes())
		}
	})
}
