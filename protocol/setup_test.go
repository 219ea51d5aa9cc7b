package protocol_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/pgtest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/lsp/lsptest"
	"github.com/mm-agent/mm/mcpclient/mcptest"
)

func TestMain(m *testing.M) {
	if os.Getenv(mcpEnv) != "" {
		serveMCP() // the MCP server of mcp_test.go
		return
	}
	if mode := os.Getenv(hostileMCPEnv); mode != "" {
		_ = mcptest.Serve(mode, os.Stdin, os.Stdout) // the hostile MCP server of mcp_hostile_test.go
		return
	}
	if filepath.Base(os.Args[0]) == "fakelsp" {
		os.Exit(lsptest.Main(os.Args[1:])) // the language server of lsp_test.go
	}
	goleak.VerifyTestMain(withPostgres{m})
}

// pg is the package's throwaway PostgreSQL server, started by the first
// test that needs one (pgstore_test.go).
var pg pgtest.Shared

// withPostgres runs the tests, then stops the server if one was started,
// before goleak looks for goroutines left behind.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int {
	code := w.m.Run()
	pg.Stop()
	return code
}

// script is the model every test talks to, over real HTTP.
const script = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^stream$"
    steps: [{text: "one two three four five", tokensPerSec: 100}]
  - match: "^think$"
    steps: [{reasoning: "let me see", text: "done"}]
  - match: "^fail$"
    steps: [{error: "the model is on fire"}]
  - match: "^garbage$"
    steps: [{garbage: true}]
  - match: "^sleep$"
    steps: [{text: "partial answer that never ends", stall: true}] # streams "partial", then nothing: only a cancel ends it
  - match: "(?s)^slow( @notes.txt\\n.*)?$"
    steps: [{sleep: 1h}] # never answers: only a cancel ends its turn
  - match: "^long$"
    steps: [{text: "cut short", finish: length}]
usage: true
`

// env is one agent served in-process against the scripted HTTP model.
type env struct {
	t      *testing.T
	server *llmtest.Server
	conn   *acptest.Conn
	init   acp.InitializeResponse
	cwd    string
	ctx    context.Context
}

func newEnv(t *testing.T, edit func(*configs.Config)) *env {
	t.Helper()
	return newEnvScript(t, script, func(c *configs.Config) {
		c.Model.ContextWindow = 16384
		if edit != nil {
			edit(c)
		}
	})
}

// scriptServer serves a script as an OpenAI-compatible model over HTTP and
// returns the openai provider pointed at it.
func scriptServer(t *testing.T, script string) (*llmtest.Server, llm.Model) {
	t.Helper()
	sc, err := llm.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(sc)
	t.Cleanup(srv.Close)
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: srv.URL(), Name: "test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	return srv, model
}

// newEnvScript serves an agent on a script. The cwd has a parent folder of
// its own, so that a write "outside the cwd" stays in the test's temp dir.
func newEnvScript(t *testing.T, script string, edit func(*configs.Config)) *env {
	t.Helper()
	return newEnvWith(t, script, edit, nil)
}

// newEnvWith is newEnvScript with more changed, when set, in the options
// the agent starts with (a sandbox).
func newEnvWith(t *testing.T, script string, edit func(*configs.Config), more func(*app.Options)) *env {
	t.Helper()
	srv, _ := scriptServer(t, script)
	cfg := configs.Default()
	cfg.Model.BaseURL = srv.URL()
	// The tests' skills are their cwd's, never the user's.
	cfg.Skills.Dirs = []string{".mm/skills"}
	if edit != nil {
		edit(cfg)
	}
	// Built from the config, which a test may point elsewhere.
	// Retries wait 10 ms, 20 ms… rather than seconds.
	model, err := llm.New(llm.Config{Provider: "openai", BaseURL: cfg.Model.BaseURL, Name: "test", Temperature: -1,
		IdleTimeout: cfg.Model.IdleTimeout, Retries: cfg.Model.Retries, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The user's state directory (the folder index, the session key) is
	// the test's, never the user's.
	opts := app.Options{Config: cfg, Model: model, StateDir: t.TempDir()}
	if more != nil {
		more(&opts)
	}
	conn, err := acptest.InProcessWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	t.Cleanup(func() {
		cancel()
		if err := conn.Close(testwait.Hang); err != nil {
			t.Errorf("agent did not stop: %v", err)
		}
	})
	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, server: srv, conn: conn, init: init, cwd: cwd, ctx: ctx}
}

func (e *env) newSession() acp.SessionId {
	e.t.Helper()
	res, err := e.conn.NewSession(e.ctx, acp.NewSessionRequest{Cwd: e.cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		e.t.Fatal(err)
	}
	// Wait for the commands so later assertions see a settled stream.
	if err := e.conn.Client.WaitUpdate(e.ctx, res.SessionId, func(u acp.SessionUpdate) bool { return u.AvailableCommandsUpdate != nil }); err != nil {
		e.t.Fatal(err)
	}
	return res.SessionId
}

func (e *env) ask(sid acp.SessionId, text string) acp.PromptResponse {
	e.t.Helper()
	res, err := e.conn.Ask(e.ctx, sid, text)
	if err != nil {
		e.t.Fatalf("prompt %q: %v", text, err)
	}
	return res
}

// requestMessages returns the messages of the last request the model server got.
func (e *env) requestMessages() []map[string]any {
	e.t.Helper()
	req := e.server.LastRequest()
	raw, _ := req["messages"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, m := range raw {
		out = append(out, m.(map[string]any))
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
