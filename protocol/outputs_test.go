package protocol_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"
	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
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

const tolerantScript = `
rules:
  - match: "^quote$"
    steps:
      - toolCalls: [{name: edit_file, args: {file_path: "msg.go", old_string: "     2\tsay(\"hi\")", new_string: "say(\"bye\")"}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

// TestTolerantEditApproved: an edit whose old_text is not in the file as
// given (copied from read_file with its number, straight quotes for the
// file's curly ones, another agent's argument names) asks the user with
// the change it really makes, makes that change, and tells the model how
// it matched.
func TestTolerantEditApproved(t *testing.T) {
	e := newEnvScript(t, tolerantScript, func(c *configs.Config) { c.Yolo = false })
	path := filepath.Join(e.cwd, "msg.go")
	if err := os.WriteFile(path, []byte("package msg\n\tsay(“hi”)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession()
	e.ask(sid, "quote")
	perms := e.conn.Client.Permissions()
	if len(perms) != 1 || len(perms[0].ToolCall.Content) != 1 || perms[0].ToolCall.Content[0].Diff == nil {
		t.Fatalf("permission requests: %+v", perms)
	}
	approved := perms[0].ToolCall.Content[0].Diff.NewText
	got, _ := os.ReadFile(path)
	if approved != "package msg\n\tsay(\"bye\")\n" || string(got) != approved {
		t.Errorf("the user approved %q, the file holds %q", approved, got)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "old_text matched only after removing the line numbers copied from read_file and ignoring trailing whitespace and Unicode quotes") {
		t.Errorf("the model read %q", text)
	}
}

// TestCutOutputGoesWithItsSession: the folder a cut output was kept in is
// removed when its session closes, and a session that cut none leaves
// none behind.
func TestCutOutputGoesWithItsSession(t *testing.T) {
	e := newEnvWith(t, outputsScript, func(c *configs.Config) { c.Model.ContextWindow = 8192 }, nil)
	mine := func(sid acp.SessionId) []string {
		got, _ := filepath.Glob(filepath.Join(tools.OutputsRoot(), strconv.Itoa(os.Getpid()), string(sid)+"-*"))
		return got
	}
	cut, idle := e.newSession(), e.newSession()
	e.ask(cut, "count")
	if len(mine(cut)) != 1 {
		t.Fatalf("the cut output's folder: %v", mine(cut))
	}
	for _, sid := range []acp.SessionId{cut, idle} {
		if _, err := e.conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the closed session's outputs removed", func() bool { return len(mine(cut)) == 0 })
	if got := mine(idle); len(got) != 0 {
		t.Errorf("a session that cut no output left %v", got)
	}
}
