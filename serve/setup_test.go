package serve_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/logs"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/serve/servetest"
)

// TestMain checks that no goroutine outlives the tests. Every client a test
// opens is closed, and its reader seen to end, by the test's cleanup
// (newClient); what winds down after that (the SDK's notification queue,
// a server's last writes) gets until testwait.Hang, so that a loaded
// machine is not taken for a leak, while a goroutine that never ends
// still fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := settledLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// settledLeaks is goleak.Find, tried again until it finds nothing or
// testwait.Hang has passed.
func settledLeaks() error {
	deadline := time.Now().Add(testwait.Hang)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// token is the tests' bearer token, named alice.
const token = "0123456789abcdef-test-token"

// script is the model of every test.
const script = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^slow$"
    steps: [{text: "thinking hard", stall: true}]
  - match: "^bash$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo ran"}}]
      - {text: "done: {{last_tool_output}}"}
`

// connector opens each connection with app.Start: a whole mm per
// connection, as cmd/mm does until the shared runtime is wired.
type connector struct {
	cfg   *configs.Config
	model llm.Model
	log   *slog.Logger
	state string
	// client, when set, records what each Connect was given.
	clients chan serve.Client
}

func (c *connector) Connect(ctx context.Context, cl serve.Client, in jsonrpc.Source, out jsonrpc.Writer) (serve.Conn, error) {
	if c.clients != nil {
		c.clients <- cl
	}
	return app.Start(app.Options{Config: c.cfg, Model: c.model, Source: in, Writer: out, Log: c.log, StateDir: c.state})
}

// env is a Server on a loopback port.
type env struct {
	t      *testing.T
	url    string // http://127.0.0.1:PORT/acp
	ws     string // ws://…/acp
	srv    *serve.Server
	stderr *syncbuf.Buffer
	cancel context.CancelFunc
	served chan error
	conn   *connector
}

// newEnv starts a server; edit changes its options before New.
func newEnv(t *testing.T, edit func(*serve.Options, *configs.Config)) *env {
	t.Helper()
	cfg := configs.Default()
	cfg.Model.Provider = "scripted"
	cfg.Skills.Dirs = []string{".mm/skills"}
	cfg.Model.WarmUp = false
	cfg.Model.Script = writeScript(t, script)
	o := serve.Options{Tokens: []serve.Token{{Name: "alice", Secret: token}, {Name: "bob", Secret: token + "-bob"}},
		// The stall timeout only bounds a hang here: a test that puts it on
		// trial sets its own, with a client that never reads.
		StallTimeout: testwait.Hang, DrainTimeout: 5 * time.Second}
	if edit != nil {
		edit(&o, cfg)
	}
	model, err := llm.New(llm.Config{Provider: "scripted", Script: cfg.Model.Script})
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	log := logs.New(stderr, slog.LevelInfo)
	conn := &connector{cfg: cfg, model: model, log: log, state: t.TempDir()}
	if o.Connector == nil {
		o.Connector = conn
	}
	o.Log = log
	srv, err := serve.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{t: t, url: "http://" + ln.Addr().String() + "/acp", ws: "ws://" + ln.Addr().String() + "/acp",
		srv: srv, stderr: stderr, cancel: cancel, served: make(chan error, 1), conn: conn}
	go func() { e.served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		if err := e.stop(testwait.Hang); err != nil {
			t.Errorf("Serve: %v", err)
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("server log:\n%s", stderr.String())
		}
	})
	return e
}

// stop ends Serve, waiting at most timeout.
func (e *env) stop(timeout time.Duration) error {
	e.cancel()
	select {
	case err := <-e.served:
		e.served <- err // for a second stop
		return err
	case <-time.After(timeout):
		return context.DeadlineExceeded
	}
}

// client is an ACP client on a stream.
type client struct {
	*acptest.Conn
	rec    *acptest.Client
	stream servetest.Stream
}

func newClient(t *testing.T, s servetest.Stream) *client {
	t.Helper()
	rec := acptest.NewClient()
	conn := acptest.Dial(rec, s, s)
	t.Cleanup(func() {
		_ = s.Close()
		// The SDK's reader ends once the closed stream gives it EOF; a
		// leak check that ran before would find it still reading.
		select {
		case <-conn.Done():
		case <-time.After(testwait.Hang):
			t.Errorf("the client's reader had not ended %v after its stream closed", testwait.Hang)
		}
	})
	return &client{Conn: conn, rec: rec, stream: s}
}

// dial opens an ACP client over transport ("websocket" or "http").
func (e *env) dial(transport, tok string) *client {
	e.t.Helper()
	if transport == serve.WebSocket {
		ws, _, err := servetest.DialWebSocket(testwait.Context(e.t), e.ws, tok, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		return newClient(e.t, ws)
	}
	return newClient(e.t, servetest.DialHTTP(e.url, tok, nil))
}

// start initializes c and opens a session in a temp dir.
func (c *client) start(t *testing.T, ctx context.Context) acp.SessionId {
	t.Helper()
	if _, err := c.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return s.SessionId
}

func (c *client) ask(ctx context.Context, sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

var transports = []string{serve.WebSocket, serve.HTTP}

// stallBound is serve.stallTimeout where a test puts it on trial with a
// client that never reads: short, yet far above what a client that does
// read needs before it stops (initialize answered, its streams opened).
const stallBound = 2 * time.Second

// waitFor polls ok, testwait.Hang at most.
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("the condition was not reached in %v", testwait.Hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeScript writes a model script and returns its path.
func writeScript(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bigScript answers "big" with 12 MB in 4 kB messages: more than the
// sockets hold, each message small, so that a client that stops reading
// takes no more of it.
func bigScript() string {
	return script + `  - match: "^big$"
    steps: [{text: "` + strings.Repeat(strings.Repeat("w", 4000)+" ", 3000) + `", tokensPerSec: 100000}]
`
}
