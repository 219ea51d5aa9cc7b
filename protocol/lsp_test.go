package protocol_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

const lspScript = `
rules:
  - match: "^def$"
    steps:
      - toolCalls: [{name: lsp, args: {action: definition, path: main.go, line: 5, column: 19}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^rename$"
    steps:
      - toolCalls: [{name: lsp, args: {action: rename, path: main.go, line: 3, column: 6, new_name: Greet}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

// lspServers are the language servers the tests run against: a scripted
// one (this test binary, started as "fakelsp") always, and gopls when it is
// on PATH.
func lspServers(t *testing.T) map[string]string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakelsp")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	servers := map[string]string{"fakelsp": bin}
	if gopls, err := exec.LookPath("gopls"); err == nil {
		servers["gopls"] = gopls
	} else {
		t.Log("gopls is not on PATH: only the scripted language server is tried")
	}
	return servers
}

// lspEnv serves a session whose Go files are answered by server.
func lspEnv(t *testing.T, server string) *env {
	t.Helper()
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	e := newEnvScript(t, lspScript, func(c *configs.Config) {
		c.Yolo = false
		c.LSP.Servers = map[string]string{"go": server}
	})
	for name, text := range map[string]string{
		"go.mod":   "module example.com/demo\n\ngo 1.21\n",
		"main.go":  "package main\n\nfunc Foo() int { return 1 }\n\nfunc main() { _ = Foo() }\n",
		"other.go": "package main\n\nvar x = Foo()\n",
	} {
		if err := os.WriteFile(filepath.Join(e.cwd, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestLSPNavigation: definition never asks, and the model reads the place.
func TestLSPNavigation(t *testing.T) {
	for name, server := range lspServers(t) {
		t.Run(name, func(t *testing.T) { testLSPNavigation(t, server) })
	}
}

func testLSPNavigation(t *testing.T, server string) {
	e := lspEnv(t, server)
	sid := e.newSession()
	e.ask(sid, "def")
	if n := len(e.conn.Client.Permissions()); n != 0 {
		t.Errorf("navigation asked %d time(s)", n)
	}
	calls, _ := toolUpdates(e.conn.Client.Updates(sid))
	if len(calls) != 1 || calls[0].Title != "lsp: definition main.go:5:19" || calls[0].Kind != acp.ToolKindRead {
		t.Fatalf("calls: %+v", calls)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, filepath.Join(e.cwd, "main.go")+":3:6") {
		t.Errorf("the model read %q", text)
	}
}

// TestLSPRename: a rename asks with every file's diff, then changes them
// all.
func TestLSPRename(t *testing.T) {
	for name, server := range lspServers(t) {
		t.Run(name, func(t *testing.T) { testLSPRename(t, server) })
	}
}

func testLSPRename(t *testing.T, server string) {
	e := lspEnv(t, server)
	sid := e.newSession()
	e.ask(sid, "rename")
	perms := e.conn.Client.Permissions()
	if len(perms) != 1 || len(perms[0].ToolCall.Content) != 2 || perms[0].ToolCall.Content[0].Diff == nil {
		t.Fatalf("permission requests: %+v", perms)
	}
	for _, name := range []string{"main.go", "other.go"} {
		b, _ := os.ReadFile(filepath.Join(e.cwd, name))
		if !strings.Contains(string(b), "Greet()") || strings.Contains(string(b), "Foo") {
			t.Errorf("%s after the rename: %q", name, b)
		}
	}
	calls, updates := toolUpdates(e.conn.Client.Updates(sid))
	if calls[0].Kind != acp.ToolKindEdit || len(updates[len(updates)-1].Content) != 2 {
		t.Errorf("rename shown as %+v / %+v", calls[0], updates[len(updates)-1])
	}
}
