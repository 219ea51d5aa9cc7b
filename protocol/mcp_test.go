package protocol_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// The test binary is also an MCP stdio server, written with the official
// go-sdk: run with MM_TEST_MCP set, it serves a few tools (setup_test.go's
// TestMain hands over to serveMCP).

const mcpEnv = "MM_TEST_MCP"

type mcpText struct {
	Text string `json:"text"`
}

type mcpSlow struct {
	Started   string `json:"started"`
	Cancelled string `json:"cancelled"`
}

// serveMCP is the MCP server's main.
func serveMCP() {
	s := mcp.NewServer(&mcp.Implementation{Name: os.Getenv(mcpEnv), Version: "1"}, nil)
	reply := func(text string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes its text", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in mcpText) (*mcp.CallToolResult, any, error) {
			return reply(os.Getenv(mcpEnv) + " says " + in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "its process id"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return reply(fmt.Sprint(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "waits until cancelled"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpSlow) (*mcp.CallToolResult, any, error) {
			_ = os.WriteFile(in.Started, []byte("started"), 0o644)
			// It never answers by itself: only a cancel ends the call.
			<-ctx.Done()
			_ = os.WriteFile(in.Cancelled, []byte("cancelled"), 0o644)
			return nil, nil, ctx.Err()
		})
	_ = s.Run(context.Background(), &mcp.StdioTransport{})
}

func mcpServer(name string) acp.McpServer {
	return acp.McpServer{Stdio: &acp.McpServerStdio{Name: name, Command: os.Args[0], Args: []string{}, Env: []acp.EnvVariable{{Name: mcpEnv, Value: name}}}}
}

// mcpScript calls the servers' tools.
func mcpScript(dir string) string {
	return fmt.Sprintf(`
rules:
  - match: "^echo$"
    steps:
      - toolCalls: [{name: mcp__alpha__echo, args: {text: hi}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^pid$"
    steps:
      - toolCalls: [{name: mcp__alpha__pid, args: {}}]
      - {text: "pid {{last_tool_output}}"}
  - match: "^slow$"
    steps:
      - toolCalls: [{name: mcp__alpha__slow, args: {started: %q, cancelled: %q}}]
      - {text: "not reached"}
usage: true
`, filepath.Join(dir, "started"), filepath.Join(dir, "cancelled"))
}

// waitTools waits until the model is offered a tool (mcp__<server>__<tool>),
// and returns the names it was offered. It fails at once if the session
// was told that the tool's server did not start or did not list its tools,
// and after testwait.Hang if the tool never comes.
func waitTools(t *testing.T, e *env, sid acp.SessionId, want string) []string {
	t.Helper()
	server, _, _ := strings.Cut(strings.TrimPrefix(want, "mcp__"), "__")
	deadline := time.Now().Add(testwait.Hang)
	for {
		e.ask(sid, "ping")
		var names []string
		tools, _ := e.server.LastRequest()["tools"].([]any)
		for _, tl := range tools {
			names = append(names, tl.(map[string]any)["function"].(map[string]any)["name"].(string))
		}
		if strings.Contains(strings.Join(names, " "), want) {
			return names
		}
		told := acptest.Text(e.conn.Client.Updates(sid))
		for _, gaveUp := range []string{fmt.Sprintf("MCP server %q did not start", server), fmt.Sprintf("MCP server %q did not list its tools", server)} {
			if i := strings.Index(told, gaveUp); i >= 0 {
				t.Fatalf("waiting for %s: %.300s", want, told[i:])
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not offered within %v; offered %v", want, testwait.Hang, names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPServers: each session connects to its own servers in the
// background; their tools are offered as mcp__<server>__<tool>, called, and
// gone with the session's close; a server that cannot start is a note.
func TestMCPServers(t *testing.T) {
	dir := t.TempDir()
	e := newEnvScript(t, mcpScript(dir), nil)
	newSession := func(servers ...acp.McpServer) acp.SessionId {
		res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: servers})
		if err != nil {
			t.Fatal(err)
		}
		return res.SessionId
	}
	a := newSession(mcpServer("alpha"))
	b := newSession(mcpServer("beta"), acp.McpServer{Stdio: &acp.McpServerStdio{Name: "broken", Command: "/no/such/server", Args: []string{}, Env: []acp.EnvVariable{}}},
		acp.McpServer{Sse: &acp.McpServerSseInline{Name: "old", Type: "sse", Url: "http://127.0.0.1:1/sse", Headers: []acp.HttpHeader{}}})

	names := waitTools(t, e, a, "mcp__alpha__echo")
	if !strings.Contains(strings.Join(names, " "), "mcp__alpha__slow") || strings.Contains(strings.Join(names, " "), "beta") {
		t.Fatalf("session a was offered %v", names)
	}
	if names := waitTools(t, e, b, "mcp__beta__echo"); strings.Contains(strings.Join(names, " "), "alpha") {
		t.Fatalf("session b was offered %v", names)
	}
	if text := acptest.Text(e.conn.Client.Updates(b)); !strings.Contains(text, `MCP server "broken" did not start`) {
		t.Errorf("no note about the broken server in %q", text)
	}
	if text := acptest.Text(e.conn.Client.Updates(b)); !strings.Contains(text, `MCP server "old" did not start: mm does not speak MCP's SSE transport`) {
		t.Errorf("no note about the SSE server in %q", text)
	}

	e.conn.Client.Reset()
	e.ask(a, "echo")
	calls, _ := toolUpdates(e.conn.Client.Updates(a))
	if len(calls) != 1 || calls[0].Kind != acp.ToolKindRead || !strings.HasPrefix(calls[0].Title, "alpha: ") {
		t.Fatalf("calls: %+v", calls)
	}
	if text := acptest.Text(e.conn.Client.Updates(a)); !strings.Contains(text, "model read: alpha says hi") {
		t.Errorf("the model read %q", text)
	}

	// A cancel during a slow call ends the turn and reaches the server.
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := e.conn.Ask(e.ctx, a, "slow")
		done <- res.StopReason
	}()
	waitFor(t, func() bool { return fileExists(filepath.Join(dir, "started")) })
	_ = e.conn.Cancel(e.ctx, acp.CancelNotification{SessionId: a})
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Fatalf("stopReason %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the cancel did not end the MCP call")
	}
	waitFor(t, func() bool { return fileExists(filepath.Join(dir, "cancelled")) })

	// Closing the session stops its server.
	e.conn.Client.Reset()
	e.ask(a, "pid")
	var pid int
	fmt.Sscanf(acptest.Text(e.conn.Client.Updates(a))[len("pid "):], "%d", &pid)
	if pid == 0 || !acptest.Alive(pid) {
		t.Fatalf("server pid %d", pid)
	}
	if _, err := e.conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: a}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !acptest.Alive(pid) })
}

// TestMCPPermissions: not in yolo, an MCP call asks first.
func TestMCPPermissions(t *testing.T) {
	e := newEnvScript(t, mcpScript(t.TempDir()), func(c *configs.Config) { c.Yolo = false })
	res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{mcpServer("alpha")}})
	if err != nil {
		t.Fatal(err)
	}
	waitTools(t, e, res.SessionId, "mcp__alpha__echo")
	e.ask(res.SessionId, "echo")
	if p := e.conn.Client.Permissions(); len(p) != 1 || !strings.HasPrefix(*p[0].ToolCall.Title, "alpha: ") {
		t.Fatalf("permission requests: %+v", p)
	}
}

// TestMCPServerConfined: with the session's commands confined
// (workspace-write, bubblewrap), an MCP stdio server the editor names runs
// in the sandbox too, and still works: its tool answers, and the process id
// it gives is the sandbox's own (its PID namespace numbers from 1).
func TestMCPServerConfined(t *testing.T) {
	sb := sandboxtest.Bubblewrap(t)
	e := newEnvWith(t, mcpScript(t.TempDir()), nil, func(o *app.Options) { o.Sandbox, o.SandboxMode = sb, sandbox.WorkspaceWrite })
	res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{mcpServer("alpha")}})
	if err != nil {
		t.Fatal(err)
	}
	waitTools(t, e, res.SessionId, "mcp__alpha__echo")
	e.ask(res.SessionId, "echo")
	if text := acptest.Text(e.conn.Client.Updates(res.SessionId)); !strings.Contains(text, "model read: alpha says hi") {
		t.Fatalf("the confined server's tool: %q", text)
	}
	e.conn.Client.Reset()
	e.ask(res.SessionId, "pid")
	text := acptest.Text(e.conn.Client.Updates(res.SessionId))
	var pid int
	if _, err := fmt.Sscanf(text[strings.Index(text, "pid ")+4:], "%d", &pid); err != nil || pid > 10 {
		t.Errorf("the server's pid is %d (%q): not the sandbox's own", pid, text)
	}
}
