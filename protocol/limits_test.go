package protocol_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
)

// limitedHub is a shared hub (mm serve's) with limits, on the test script.
func limitedHub(t *testing.T, limits protocol.Limits, edit func(*configs.Config)) *hubEnv {
	t.Helper()
	return newHubEnvWith(t, script, edit, func(o *app.Options) { o.Limits = limits })
}

// TestSessionsPerToken: a token holds at most serve.maxSessionsPerToken
// live sessions (issue 28: one connection opened 5,000 in 13 s): past it,
// session/new is refused with an error that says so, another token is not
// held back, and a close makes room again.
func TestSessionsPerToken(t *testing.T) {
	e := limitedHub(t, protocol.Limits{SessionsPerToken: 3}, nil)
	alice, bob := e.client("alice"), e.client("bob")
	var sids []acp.SessionId
	for range 3 {
		sids = append(sids, e.newSession(alice))
	}
	_, err := alice.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	var re *acp.RequestError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "serve.maxSessionsPerToken") {
		t.Fatalf("a fourth session: %v, want the limit named", err)
	}
	// Bob in a folder of his own: alice's is hers (folders have owners).
	if _, err := bob.NewSession(e.ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("bob's session, alice at her limit: %v", err)
	}
	if _, err := alice.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: sids[0]}); err != nil {
		t.Fatal(err)
	}
	e.newSession(alice)
}

// TestMCPProcessesPerToken: the MCP server processes of a token's sessions
// are bounded too: a session whose stdio servers would pass the limit is
// refused before any of them starts.
func TestMCPProcessesPerToken(t *testing.T) {
	e := limitedHub(t, protocol.Limits{SessionsPerToken: 10, MCPPerToken: 2}, nil)
	alice := e.client("alice")
	servers := func(n int) []acp.McpServer {
		var out []acp.McpServer
		for i := range n {
			out = append(out, acp.McpServer{Stdio: &acp.McpServerStdio{Name: "s" + string(rune('a'+i)), Command: "sleep", Args: []string{"30"}, Env: []acp.EnvVariable{}}})
		}
		return out
	}
	if _, err := alice.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: servers(2)}); err != nil {
		t.Fatal(err)
	}
	_, err := alice.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: servers(1)})
	var re *acp.RequestError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "serve.maxMCPProcessesPerToken") {
		t.Fatalf("a session past the MCP processes: %v, want the limit named", err)
	}
	if _, err := alice.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("a session with no MCP server: %v", err)
	}
}

// TestDetachedSessionsStop: a session no connection holds stops after
// serve.detachedIdle (issue 28: they stayed live for good after their
// client left), saved: its token loads it again, with its history.
func TestDetachedSessionsStop(t *testing.T) {
	e := limitedHub(t, protocol.Limits{SessionsPerToken: 10, DetachedIdle: 300 * time.Millisecond},
		func(c *configs.Config) { c.Sessions.Enabled = true })
	c := acptest.OnHub(e.hub, protocol.ConnOptions{Owner: "alice"})
	if _, err := c.Init(e.ctx); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession(c)
	if res, err := c.Ask(e.ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", res, err)
	}
	if err := c.Close(testwait.Hang); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.hub.Sessions() == 0 })
	again := e.client("alice")
	if _, err := again.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("loading the stopped session: %v", err)
	}
	if text := acptest.Text(again.Client.Updates(sid)); !strings.Contains(text, "pong") {
		t.Errorf("its history: %q", text)
	}
}

// TestToolsStayInTheRoots: on a server, mm's own file tools open nothing
// outside serve.roots for a session (issue 28: read_file of an absolute
// path outside the root returned the file), and an @mention outside is
// not looked at: the model reads the refusal, the turn goes on.
func TestToolsStayInTheRoots(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	peek := fmt.Sprintf(`
rules:
  - match: "^peek"
    steps:
      - toolCalls: [{name: read_file, args: {path: %q}}]
      - {text: "it said: {{last_tool_output}}"}
`, secret)
	e := newHubEnvScript(t, peek, nil)
	root := t.TempDir()
	c := e.client("alice", root)
	res, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: root, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Ask(e.ctx, res.SessionId, "peek @"+secret); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("peek: %v %v", r, err)
	}
	text := acptest.Text(c.Client.Updates(res.SessionId))
	if strings.Contains(text, "the secret") || !strings.Contains(text, "outside the folders this server serves") {
		t.Errorf("the turn read: %q", text)
	}
	if last, _ := json.Marshal(e.server.LastRequest()); strings.Contains(string(last), "attached file: "+secret) {
		t.Error("an @mention outside the roots was attached")
	}
}
