package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/pgtest"
	"github.com/mm-agent/mm/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }

// pg is the package's throwaway PostgreSQL server, started by the first
// test that needs one (backend_test.go).
var pg pgtest.Shared

// pgURL is the URL of a new schema of pg for one test. Starting the server
// takes seconds, so -short leaves the PostgreSQL tests out.
func pgURL(t testing.TB) string {
	t.Helper()
	testwait.Short(t, "the PostgreSQL tests, which start a server")
	return pg.URL(t)
}

// withPostgres runs the tests, then stops the server if one was started,
// before goleak looks for goroutines left behind.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int {
	code := w.m.Run()
	pg.Stop()
	return code
}

// t0 is a fixed instant, so that fixtures encode the same bytes in the
// parent test and in the crash-test child.
var t0 = time.Date(2026, 9, 16, 10, 15, 30, 0, time.UTC)

// text returns n bytes of code-like text, with the quotes, newlines and
// angle brackets real tool output has, so that encoding does real escaping.
func text(seed, n int) string {
	const line = "func main() { if a < b && c > d { fmt.Println(\"hello\\tworld\") } }\n"
	var b strings.Builder
	b.Grow(n + len(line))
	fmt.Fprintf(&b, "[%d] ", seed)
	for b.Len() < n {
		b.WriteString(line)
	}
	return b.String()[:n]
}

// fixtureHistory builds a realistic history of about n messages: the system
// prompt, then turns of a user prompt, an assistant message calling bash,
// the tool answer with its ACP bookkeeping, and an assistant answer. Every
// content is about size bytes.
func fixtureHistory(n, size int) []history.Message {
	h := make([]history.Message, 0, n+4)
	h = append(h, history.Message{Role: history.RoleSystem, Content: "You are Bob, a bash-first coding agent.\n" + text(0, size)})
	for call := 1; len(h) < n; call++ {
		id := fmt.Sprintf("call_%d", call)
		cmd := fmt.Sprintf("grep -rn 'pattern %d' ./...", call)
		h = append(h,
			history.Message{Role: history.RoleUser, Content: fmt.Sprintf("Fix the failing test number %d\n", call) + text(call, size)},
			history.Message{Role: history.RoleAssistant, Content: text(call+1, size), ToolCalls: []history.ToolCall{{
				ID: "fc_" + id, Name: "bash", Arguments: fmt.Sprintf(`{"command":%q}`, cmd),
			}}},
			history.Message{
				Role: history.RoleTool, Content: text(call+2, size), ToolCallID: "fc_" + id, Name: "bash",
				CallRef: id, Title: "bash: " + cmd, Kind: "execute",
				RawInput: map[string]any{"command": cmd}, Failed: call%7 == 0,
			},
			history.Message{Role: history.RoleAssistant, Content: text(call+3, size)},
		)
	}
	return h[:n]
}

// file returns a session file holding fixtureHistory(n, size).
func file(id string, n, size int) *File {
	return &File{
		ID:         id,
		Cwd:        "/home/bob/project",
		Created:    t0,
		Updated:    t0.Add(time.Minute),
		Provenance: Provenance{SessionID: id, Kind: "root"},
		Mode:       "ask",
		Model:      "qwen3-coder",
		Usage:      Usage{Reported: true, Input: 12000, Output: 800, CachedRead: 9000, CachedReadReported: true},
		History:    fixtureHistory(n, size),
	}
}

// mustMarshal encodes f or stops the test.
func mustMarshal(tb testing.TB, f *File) []byte {
	tb.Helper()
	data, err := Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
