package serve

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mm-agent/mm/jsonrpc"
)

// BenchmarkParseMessage: reading a client's prompt frame and the members
// routing asks of it.
func BenchmarkParseMessage(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":12,"method":"session/prompt","params":{"sessionId":"20261202-061500-4f2a9c1e","prompt":[{"type":"text","text":"` + strings.Repeat("word ", 40) + `"}]}}`)
	for b.Loop() {
		m, _ := parseMessage(frame)
		_, _ = m.sessionID()
		_ = m.isRequest()
		_ = m.isInitialize()
		_, _ = jsonrpc.IDOf([]byte(m.id().Raw))
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
