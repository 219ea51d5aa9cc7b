package protocol_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/lsp/lsptest"
)

const hostileLSPScript = `
rules:
  - match: "^def$"
    steps:
      - toolCalls: [{name: lsp, args: {action: definition, path: main.go, line: 5, column: 19}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ping$"
    steps: [{text: "pong"}]
usage: true
`

// TestHostileLanguageServer (issue 18): a language server that attacks
// mm through its framing, by flooding it or by never answering costs a
// bounded heap; the model and the user read one line that says what
// happened, and another session's ping is answered meanwhile.
func TestHostileLanguageServer(t *testing.T) {
	testwait.Short(t, "language servers that attack mm")
	for _, tc := range []struct{ attack, want string }{
		{"endless-header", "[lsp: the go server misbehaved (a header over 4 KiB); stopped]"},
		{"ask-flood", "[lsp: the go server misbehaved (64 answers to its requests unread); stopped]"},
		{"log-flood", ":3:6: func Foo() int { return 1 }"},
		{"stderr-flood", ":3:6: func Foo() int { return 1 }"},
		{"mute", "[lsp: the go server did not answer within 1s (lsp.timeout)]"},
	} {
		t.Run(tc.attack, func(t *testing.T) { testHostileLanguageServer(t, tc.attack, tc.want) })
	}
}

func testHostileLanguageServer(t *testing.T, attack, want string) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	bin := filepath.Join(t.TempDir(), "fakelsp")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record.jsonl")
	e := newEnvScript(t, hostileLSPScript, func(c *configs.Config) {
		c.Turns.Concurrency = 4
		c.LSP.Servers = map[string]string{"go": bin + " -attack " + attack + " -record " + record}
		// lsp.timeout is on trial against the mute server alone, which
		// never answers: the limit is its only way out. For the others it
		// only bounds a hang, since it also bounds a call's start (the
		// server started, initialized) on a machine that may be slow.
		c.LSP.Timeout = testwait.Hang
		if attack == "mute" {
			c.LSP.Timeout = time.Second
		}
	})
	for name, text := range map[string]string{
		"go.mod":  "module example.com/demo\n\ngo 1.21\n",
		"main.go": "package main\n\nfunc Foo() int { return 1 }\n\nfunc main() { _ = Foo() }\n",
	} {
		if err := os.WriteFile(filepath.Join(e.cwd, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	victim, other := e.newSession(), e.newSession()
	e.ask(other, "ping") // warm

	w := lsptest.WatchHeap(1<<30, func() {
		rs, _ := lsptest.ReadRecords(record)
		for _, r := range rs {
			if r.Method == "start" {
				_ = syscall.Kill(r.PID, syscall.SIGKILL)
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := e.conn.Ask(e.ctx, victim, "def")
		done <- err
	}()
	// The other session pings until the attacked turn is over, and 20
	// times more, since some attacks go on after it.
	var worst time.Duration
	pings, after := 0, 0
	for finished := false; !finished || after < 20; pings++ {
		if finished {
			after++
		}
		start := time.Now()
		if res := e.ask(other, "ping"); res.StopReason != acp.StopReasonEndTurn {
			t.Errorf("ping: %s", res.StopReason)
		}
		worst = max(worst, time.Since(start))
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the attacked turn: %v", err)
			}
			finished = true
		default:
		}
	}
	peak, took, cpu, tripped := w.Stop()
	t.Logf("%s: the heap grew by %.1f MiB at its peak; %v, %v of CPU; %d pings of the other session, the slowest answered in %v",
		attack, float64(peak)/(1<<20), took.Round(time.Millisecond), cpu.Round(time.Millisecond), pings, worst.Round(time.Millisecond))
	if tripped || peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB", peak>>20)
	}

	ups := e.conn.Client.Updates(victim)
	_, updates := toolUpdates(ups)
	b, _ := json.Marshal(updates)
	if !strings.Contains(string(b), jsonText(want)) {
		t.Errorf("the user was not shown %q: %s", want, b)
	}
	if text := acptest.Text(ups); !strings.Contains(text, "model read: ") || !strings.Contains(text, want) {
		t.Errorf("the model read %q, want %q", text, want)
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
