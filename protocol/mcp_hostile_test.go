package protocol_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/mcpclient/mcptest"
)

// The hostile MCP servers of these tests are the test binary again, run
// with MM_TEST_MCP_HOSTILE set to a mode of mcptest.Serve: it writes its
// answers by hand, as no SDK would.

const hostileMCPEnv = "MM_TEST_MCP_HOSTILE"

const hostileScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^wait$"
    steps:
      - toolCalls: [{name: mcp__hang__wait, args: {}}]
      - {text: "model read: {{last_tool_output}}"}
usage: true
`

func hostileMCP(name, mode string) acp.McpServer {
	return acp.McpServer{Stdio: &acp.McpServerStdio{Name: name, Command: os.Args[0], Args: []string{},
		Env: []acp.EnvVariable{{Name: hostileMCPEnv, Value: mode}}}}
}

// newHostileEnv serves the agent with four turn slots, as the issue's
// figures are taken.
func newHostileEnv(t *testing.T, edit func(*configs.Config)) *env {
	t.Helper()
	return newEnvScript(t, hostileScript, func(c *configs.Config) {
		c.Turns.Concurrency = 4
		if edit != nil {
			edit(c)
		}
	})
}

// openWith opens a session with an MCP server.
func openWith(t *testing.T, e *env, server acp.McpServer) acp.SessionId {
	t.Helper()
	res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{server}})
	if err != nil {
		t.Fatal(err)
	}
	return res.SessionId
}

// offered lists the tools of the model's last request, by name.
func offered(e *env) []string {
	var names []string
	tools, _ := e.server.LastRequest()["tools"].([]any)
	for _, tl := range tools {
		names = append(names, tl.(map[string]any)["function"].(map[string]any)["name"].(string))
	}
	return names
}

// TestMCPInvalidSchemasLeftOut: a server whose tools have input schemas no
// model server takes ({"type":5}, a string…) has those tools left out with
// one warning; its good tool is offered, and every turn goes on. Before,
// they went to the model server, which refused every request of the
// session with HTTP 400.
func TestMCPInvalidSchemasLeftOut(t *testing.T) {
	e := newHostileEnv(t, nil)
	other := e.newSession()
	var sid acp.SessionId
	var names []string
	f := measureAttack(t, e.ctx, e.conn, other, func() {
		sid = openWith(t, e, hostileMCP("bad", mcptest.BadSchemas))
		names = waitTools(t, e, sid, "mcp__bad__echo")
	})
	t.Logf("listed: %s", f)
	joined := strings.Join(names, " ")
	if !strings.Contains(joined, "mcp__bad__echo") {
		t.Fatalf("the good tool is not offered: %v", names)
	}
	for name := range mcptest.BadTools {
		if strings.Contains(joined, "mcp__bad__"+name) {
			t.Errorf("%s is offered", name)
		}
	}
	text := acptest.Text(e.conn.Client.Updates(sid))
	for _, want := range []string{`⚠️ MCP server "bad": 4 tools left out, their input schema is not an object schema a model takes: `, `bad_number ({"type":5})`} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in %q", want, text)
		}
	}
	e.conn.Client.Reset()
	e.ask(sid, "ping")
	if text := acptest.Text(e.conn.Client.Updates(sid)); text != "pong" {
		t.Errorf("the turn after the listing: %q", text)
	}
}

// TestMCPTooManyTools: a server listing 100,000 tools has its first
// mcp.maxTools offered, with a warning; the rest never reach the model's
// requests nor stay in memory.
func TestMCPTooManyTools(t *testing.T) {
	testwait.Short(t, "a listing of 100,000 tools")
	// The SDK reads and decodes the whole page (11 MB for 100,000 tools)
	// within mcpclient's fixed 30 s for a listing. Under the race detector
	// on a busy 2-core machine that took longer than 30 s, and the server
	// was given up ("0 of the server's tools offered"): there, a tenth of
	// it, still 78 times mcp.maxTools, keeps that limit far above the work.
	n := 100000
	if raceBuild {
		n = 10000
	}
	e := newHostileEnv(t, func(c *configs.Config) { c.MCP.MaxTools = 128 })
	other := e.newSession()
	var sid acp.SessionId
	var names []string
	f := measureAttack(t, e.ctx, e.conn, other, func() {
		sid = openWith(t, e, hostileMCP("many", mcptest.ManyTools+":"+strconv.Itoa(n)))
		names = waitTools(t, e, sid, "mcp__many__t0")
	})
	warnings := acptest.Text(e.conn.Client.Updates(sid))
	e.ask(sid, "ping")
	body, _ := json.Marshal(e.server.LastRequest())
	t.Logf("%d tools listed, %d offered: %s; a request is %d KiB", n, len(names), f, len(body)>>10)
	many := 0
	for _, name := range offered(e) {
		if strings.HasPrefix(name, "mcp__many__") {
			many++
		}
	}
	if many != 128 {
		t.Errorf("%d of the server's tools offered, want 128", many)
	}
	for _, name := range []string{"mcp__many__t0", "mcp__many__t127"} {
		if !strings.Contains(strings.Join(names, " "), name) {
			t.Errorf("%s, one of the first 128, is not offered", name)
		}
	}
	want := `MCP server "many" lists more than 128 tools (mcp.maxTools); only its first 128 are offered`
	if !strings.Contains(warnings, want) {
		t.Errorf("no warning %q in %q", want, warnings)
	}
}

// TestMCPCallTimeout: a tools/call the server never answers ends after
// mcp.timeout, or the server's own timeout, with a note the model reads;
// the turn goes on.
func TestMCPCallTimeout(t *testing.T) {
	testwait.Short(t, "MCP calls left to their time limit")
	for _, c := range []struct {
		name   string
		edit   func(*configs.Config)
		editor bool // the server is the editor's, else the config's
		key    string
	}{
		{"mcp.timeout", func(c *configs.Config) { c.MCP.Timeout = time.Second }, true, "mcp.timeout"},
		{"the server's timeout", func(c *configs.Config) {
			c.MCP.Timeout = time.Hour
			c.MCP.Servers = []configs.MCPServer{{Name: "hang", Command: os.Args[0], Env: map[string]string{hostileMCPEnv: mcptest.Hang}, Timeout: time.Second}}
		}, false, `the timeout of mcp.servers "hang"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newHostileEnv(t, c.edit)
			var sid acp.SessionId
			if c.editor {
				sid = openWith(t, e, hostileMCP("hang", mcptest.Hang))
			} else {
				sid = e.newSession()
			}
			waitTools(t, e, sid, "mcp__hang__wait")
			e.conn.Client.Reset()
			other := e.newSession()
			// The server never answers the call: the time limit is the only
			// way the call ends, and e.ctx bounds only a hang.
			var res acp.PromptResponse
			var err error
			f := measureAttack(t, e.ctx, e.conn, other, func() { res, err = e.conn.Ask(e.ctx, sid, "wait") })
			t.Logf("the unanswered call: %s", f)
			if err != nil || res.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("the turn with an unanswered call: %v %v", res.StopReason, err)
			}
			want := `model read: [MCP server "hang" did not answer the call of "wait" within 1s (` + c.key + `); the call was cancelled]`
			if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, want) {
				t.Errorf("the model read %q, want %q", text, want)
			}
		})
	}
}

// TestMCPWarningAsNotice: a client that announces session.notices gets
// the MCP schema warning as a notice update (severity warning), not as
// "⚠️ …" text in the agent's answer, which stays the model's words.
func TestMCPWarningAsNotice(t *testing.T) {
	r, _ := newRawAgentWith(t, hostileScript, nil)
	cwd := t.TempDir()
	bad, _ := json.Marshal(hostileMCP("bad", mcptest.BadSchemas))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"session":{"notices":{}}}}}`)
	r.response(1)
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[%s]}}`, cwd, bad))
	sid := r.response(2)["result"].(map[string]any)["sessionId"].(string)
	var notices []map[string]any
	var text strings.Builder
	deadline := time.Now().Add(testwait.Hang)
	for id := 3.0; len(notices) == 0 && time.Now().Before(deadline); id++ {
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"ping"}]}}`, id, sid))
		for m := range r.lines {
			if got, ok := m["id"].(float64); ok && got == id {
				break
			}
			u, _ := m["params"].(map[string]any)["update"].(map[string]any)
			switch u["sessionUpdate"] {
			case "notice":
				notices = append(notices, u)
			case "agent_message_chunk":
				text.WriteString(fmt.Sprint(u["content"].(map[string]any)["text"]))
			}
		}
		if len(notices) == 0 {
			time.Sleep(50 * time.Millisecond) // the listing is not over yet
		}
	}
	if len(notices) != 1 || notices[0]["severity"] != "warning" || !strings.HasPrefix(fmt.Sprint(notices[0]["title"]), `MCP server "bad": 4 tools left out`) {
		t.Errorf("notices: %v", notices)
	}
	if strings.Contains(text.String(), "⚠️") || !strings.Contains(text.String(), "pong") {
		t.Errorf("the agent's text: %q, want the model's words only", text.String())
	}
}
