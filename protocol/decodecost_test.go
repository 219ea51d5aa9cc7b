package protocol

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// TestDecodeWithinCharge: what mm allocates decoding a request's params —
// every method's decoder, on the shapes that cost it most (long strings,
// many small blocks, content blocks read through a map, `_meta` as
// map[string]any, long lists) — stays within what mm serve's room charges
// the message for its decoding (jsonrpc.DecodeBytes: its bytes once more,
// jsonrpc.ValueBytes a value). The room bounds mm's memory only as long as
// this holds (issue 42).
func TestDecodeWithinCharge(t *testing.T) {
	const n = 1 << 20
	rep := func(s string, size int) string { return strings.Repeat(s, size/len(s)) }
	prompt := func(blocks string) string {
		return `{"sessionId":"s","prompt":[` + blocks + `{"type":"text","text":""}]}`
	}
	meta := `"_meta":{"a":[` + rep(`{},`, n) + `{}]}`
	decode := func(method string) func(json.RawMessage) (any, *acp.RequestError) {
		if d := methods[method].decode; d != nil {
			return d
		}
		return decoder[acp.InitializeRequest]() // the methods served on their own decode this way (conn)
	}
	for _, c := range []struct{ name, method, params string }{
		{"a long text", acp.AgentMethodSessionPrompt, `{"sessionId":"s","prompt":[{"type":"text","text":"` + rep("a", n) + `"}]}`},
		{"a text of \\u escapes", acp.AgentMethodSessionPrompt, `{"sessionId":"s","prompt":[{"type":"text","text":"` + rep(`\u00e9\n`, n) + `"}]}`},
		{"a text with one \\u escape", acp.AgentMethodSessionPrompt, `{"sessionId":"s","prompt":[{"type":"text","text":"\u00e9` + rep("a", n) + `"}]}`},
		{"a text with one escape", acp.AgentMethodSessionPrompt, `{"sessionId":"s","prompt":[{"type":"text","text":"\n` + rep("a", n) + `"}]}`},
		{"strings just past Go's small sizes", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[],"_meta":{"a":[` + rep(`"\n`+strings.Repeat("a", 32<<10)+`",`, n) + `""]}}`},
		{"a long string in _meta", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[],"_meta":{"a":"\n` + rep("a", n) + `"}}`},
		{"empty text blocks", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"text","text":""},`, n))},
		{"text blocks with more members", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"text","text":"","x":0},`, n))},
		{"image blocks", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"image","data":"","mimeType":""},`, n))},
		{"audio blocks", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"audio","data":"","mimeType":""},`, n))},
		{"resource blocks", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"resource","resource":{"uri":"","text":""}},`, n))},
		{"resource links", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"resource_link","name":"","uri":"","annotations":{"audience":["user"]}},`, n))},
		{"blocks with _meta", acp.AgentMethodSessionPrompt, prompt(rep(`{"type":"image","data":"","mimeType":"","_meta":{}},`, n))},
		{"a prompt's _meta", acp.AgentMethodSessionPrompt, `{"sessionId":"s","prompt":[],` + meta + `}`},
		{"MCP servers' args", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[{"name":"x","command":"y","env":[],"args":[` + rep(`"",`, n) + `""]}]}`},
		{"MCP servers' env", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[{"name":"x","command":"y","args":[],"env":[` + rep(`{"name":"","value":""},`, n) + `{"name":"","value":""}]}]}`},
		{"MCP servers", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[` + rep(`{"name":"","command":"","args":[],"env":[]},`, n) + `{"name":"","command":"","args":[],"env":[]}]}`},
		{"HTTP MCP servers", acp.AgentMethodSessionLoad, `{"sessionId":"s","cwd":"/","mcpServers":[` + rep(`{"type":"http","name":"","url":"","headers":[{"name":"","value":""}]},`, n) + `{"name":"","command":"","args":[],"env":[]}]}`},
		{"additional directories", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[],"additionalDirectories":[` + rep(`"",`, n) + `""]}`},
		{"numbers in _meta", acp.AgentMethodSessionNew, `{"cwd":"/","mcpServers":[],"_meta":{"a":[` + rep(`0,`, n) + `0]}}`},
		{"arrays in _meta", acp.AgentMethodSessionResume, `{"sessionId":"s","cwd":"/","_meta":{"a":[` + rep(`[],`, n) + `[]]}}`},
		{"members in _meta", acp.AgentMethodSessionFork, `{"sessionId":"s","cwd":"/","_meta":{` + rep(`"":{},`, n) + `"b":{}}}`},
		{"initialize's capabilities", acp.AgentMethodInitialize, `{"protocolVersion":1,"clientCapabilities":{` + meta + `}}`},
	} {
		raw := json.RawMessage(c.params)
		var values jsonrpc.Values
		_, _ = values.Write(raw)
		charge := jsonrpc.DecodeBytes(len(raw), values.N())
		dec := decode(c.method)
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		_, rerr := dec(raw)
		runtime.ReadMemStats(&b)
		got := int64(b.TotalAlloc - a.TotalAlloc)
		t.Logf("%-30s %8d bytes, %7d values: %10d allocated, %4.0f a value; charged %10d (%s)", c.name, len(raw), values.N(), got,
			float64(got-int64(len(raw)))/float64(values.N()), charge, errText(rerr))
		if got > charge {
			t.Errorf("%s (%s): decoding allocates %d, more than the %d charged for %d bytes and %d values", c.name, c.method, got, charge, len(raw), values.N())
		}
	}
}

func errText(rerr *acp.RequestError) string {
	if rerr == nil {
		return "decoded"
	}
	return "refused"
}
