package protocol_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// TestInstructionsStayInTheRoots: on a server, a session reads project
// instructions only where its file tools may read: not above its tenant's
// roots (the repository's root may be the server's, not the tenant's),
// and not in a path its sandbox hides (here the folder of session files);
// a visible subfolder's file still reaches the model when a command names
// a file there.
func TestInstructionsStayInTheRoots(t *testing.T) {
	sb := sandboxtest.Bubblewrap(t)
	outer := t.TempDir()
	root := filepath.Join(outer, "tenant")
	for name, text := range map[string]string{
		".git/HEAD":                     "ref: refs/heads/main\n",
		"AGENTS.md":                     "OUTSIDE-RULES\n",
		"tenant/AGENTS.md":              "TENANT-RULES\n",
		"tenant/sub/AGENTS.md":          "SUB-RULES\n",
		"tenant/sub/y":                  "",
		"tenant/.mm/sessions/AGENTS.md": "HIDDEN-RULES\n",
		"tenant/.mm/sessions/x":         "",
	} {
		path := filepath.Join(outer, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	peek := `
rules:
  - match: "^peek$"
    steps:
      - toolCalls: [{name: bash, args: {command: "ls .mm/sessions/x sub/y; true"}}]
      - {text: "done"}
`
	e := newHubEnvWith(t, peek, nil, func(o *app.Options) { o.Sandbox, o.SandboxMode = sb, sandbox.WorkspaceWrite })
	c := e.client("alice", root)
	res, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: root, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Ask(e.ctx, res.SessionId, "peek"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("peek: %v %v", r, err)
	}
	msgs := e.server.LastRequest()["messages"].([]any)
	system := msgs[0].(map[string]any)["content"].(string)
	if !strings.Contains(system, "TENANT-RULES") || strings.Contains(system, "OUTSIDE-RULES") {
		t.Errorf("the system message holds the wrong instructions:\n%s", system)
	}
	if !strings.Contains(system, "- Sandbox: workspace-write: commands and file tools may write only in "+root) {
		t.Errorf("the environment block does not say the sandbox:\n%s", system)
	}
	var result string
	for _, m := range msgs {
		if mm := m.(map[string]any); mm["role"] == "tool" {
			result, _ = mm["content"].(string)
		}
	}
	if !strings.Contains(result, "SUB-RULES") || strings.Contains(result, "HIDDEN-RULES") {
		t.Errorf("the command's result shows the wrong instructions:\n%s", result)
	}
}

// TestEnvironmentFollowsTheMode: the environment block says whether calls
// wait for the user's approval, and says it anew once the user switches
// the session's mode; the rest of the block stays as it was gathered.
func TestEnvironmentFollowsTheMode(t *testing.T) {
	e := newSessEnv(t, `rules: [{match: "^hi$", steps: [{text: "hello"}]}]`, nil)
	conn := e.agent()
	sid := e.newSession(conn)
	system := func() string {
		e.ask(conn, sid, "hi")
		msgs := e.server.LastRequest()["messages"].([]any)
		return msgs[0].(map[string]any)["content"].(string)
	}
	yolo := system()
	if !strings.Contains(yolo, "- Approval: edits and commands run without asking (yolo)") {
		t.Fatalf("a yolo session's block:\n%s", yolo)
	}
	if _, err := conn.SetSessionMode(e.ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: "ask"}); err != nil {
		t.Fatal(err)
	}
	ask := system()
	want := strings.Replace(yolo, "- Approval: edits and commands run without asking (yolo), except calls that touch sensitive files such as .env and keys\n",
		"- Approval: the user approves each edit and command before it runs; a call they reject comes back saying so, and is not to be tried again unchanged\n", 1)
	if ask != want {
		t.Errorf("after set_mode ask, the system message is:\n%s\nwant:\n%s", ask, want)
	}
}
