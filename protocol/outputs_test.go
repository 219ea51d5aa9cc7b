package protocol_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/app"
	"github.com/mm-agent/mm/protocol/acptest"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
	"github.com/mm-agent/mm/tools"
)

const outputsScript = `
rules:
  - match: "^count$"
    steps:
      - toolCalls: [{name: bash, args: {command: "seq 1 300000"}}]
      - toolCalls: [{name: bash, args: {command: "wc -l $(ls -d /tmp/mm-outputs-*/*/*/*.out)"}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

// TestCutOutputSearchableInTheSandbox: a confined command (bubblewrap,
// workspace-write, /tmp its own) finds the file a cut output names, whole,
// and no other session's.
func TestCutOutputSearchableInTheSandbox(t *testing.T) {
	sb := sandboxtest.Bubblewrap(t)
	other := filepath.Join(tools.OutputsRoot(), strconv.Itoa(os.Getpid()), "another-session")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	if err := os.WriteFile(filepath.Join(other, "call_0.out"), []byte("theirs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, outputsScript, func(c *configs.Config) { c.Model.ContextWindow = 8192 },
		func(o *app.Options) { o.Sandbox, o.SandboxMode = sb, sandbox.WorkspaceWrite })
	sid := e.newSession()
	e.ask(sid, "count")
	text := acptest.Text(e.conn.Client.Updates(sid))
	if !strings.Contains(text, "model read: 300000 /tmp/mm-outputs-") || strings.Contains(text, "another-session") {
		t.Errorf("the confined command found %q", text)
	}
}
