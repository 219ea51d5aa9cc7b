package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
	"github.com/mm-agent/mm/serve/servetest"
)

// serveToken is the token of the served mm in these tests.
const serveToken = "serve-test-token-0123456789"

// serveScript is the scripted model of `mm serve` in these tests.
const serveScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^slow$"
    steps: [{text: "thinking hard", stall: true}]
  - match: "^steady$"
    steps: [{text: "steady words that take a second or so to stream to the end", tokensPerSec: 10}]
  - match: "^bash$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo ran-in-bash"}}]
      - {text: "bash said: {{last_tool_output}}"}
`

// bigScript is serveScript and "big": 12 MB in 4 kB messages, more than
// the sockets hold, and each message small, so that a client that stops
// reading takes no more of it. Only the tests of such a client have it: a
// race-built mm takes seconds to read a script of 12 MB (6 s on an idle
// machine), which every node of every cluster paid before it listened.
func bigScript() string {
	big := strings.Repeat(strings.Repeat("w", 4000)+" ", 3000)
	return serveScript + "  - match: \"^big$\"\n    steps: [{text: \"" + big + "\", tokensPerSec: 100000}]\n"
}

// served is one `mm serve` process.
type served struct {
	url    string // http://127.0.0.1:PORT/acp (https:// with serve.tls)
	ws     string // ws://…/acp (wss://)
	cmd    *exec.Cmd
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	exited chan error
	dir    string // HOME and the start directory
}

// startServe runs `mm serve -listen 127.0.0.1:0` on the scripted model,
// with extra config text appended (top-level sections), and waits for the
// line naming its address.
func startServe(t testing.TB, extra string) *served {
	t.Helper()
	return startServeEnv(t, extra, "MM_SERVE_TOKEN="+serveToken)
}

// startServeEnv is startServe with env added to the process's environment
// (HOME and PATH only otherwise).
func startServeEnv(t testing.TB, extra string, env ...string) *served {
	t.Helper()
	return startServeAt(t, t.TempDir(), "config.yaml", extra, env...)
}

// startServeAt is startServeEnv in dir (HOME, the start directory, the
// roots), with its config in dir/name: the nodes of a cluster share a
// folder.
func startServeAt(t testing.TB, dir, name, extra string, env ...string) *served {
	t.Helper()
	return startServeBin(t, mmBin, dir, name, extra, env...)
}

// scriptedModel is the model: section of a served mm in these tests: the
// scripted model playing serveScript, from script.yaml in its folder.
const scriptedModel = "model:\n  provider: scripted\n  script: script.yaml\n  warmUp: false\n"

// startServeBin is startServeAt with the mm binary bin.
func startServeBin(t testing.TB, bin, dir, name, extra string, env ...string) *served {
	t.Helper()
	return startServeModel(t, bin, dir, name, scriptedModel, serveScript, extra, env...)
}

// startServeBig is startServe on bigScript.
func startServeBig(t testing.TB, extra string) *served {
	t.Helper()
	return startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, bigScript(), extra, "MM_SERVE_TOKEN="+serveToken)
}

// startServeModel is startServeBin with model as the config's model:
// section and script in script.yaml. It waits for the process to say where it listens, or to exit:
// a loaded machine with an empty build cache may take long to start a
// race-built mm; only testwait.Hang ends the wait.
func startServeModel(t testing.TB, bin, dir, name, model, script, extra string, env ...string) *served {
	t.Helper()
	return startServeIn(t, nil, bin, dir, name, model, script, extra, env...)
}

// defaultConfig is where mm looks for its config in HOME.
const defaultConfig = ".config/mm/config.yaml"

// startServeIn is startServeModel with the command run through prefix
// (`ip netns exec NS`: a node in a network namespace of the test's).
//
// The config is written to name, in dir; the model's script beside it. A
// name of defaultConfig is where mm looks without -config (dir is HOME),
// and mm serve is given none.
func startServeIn(t testing.TB, prefix []string, bin, dir, name, model, script, extra string, env ...string) *served {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Dir(name), "script.yaml"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := model + "skills:\n  dirs: []\n" + extra
	if err := os.WriteFile(filepath.Join(dir, name), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The config's path as many write it, relative to where mm serve
	// starts: what mm hides of it from its tenants must be the file.
	argv := append(slices.Clone(prefix), bin, "serve", "-listen", "127.0.0.1:0", "-config", name)
	if name == defaultConfig {
		argv = argv[:len(argv)-2]
	}
	if prof := os.Getenv("MM_TEST_CPUPROFILES"); prof != "" {
		// Performance work: each mm serve writes its CPU profile there.
		argv = append(argv, "-cpuprofile", filepath.Join(prof, strings.NewReplacer("/", "_").Replace(name)+".prof"))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	if v := os.Getenv("MM_TEST_NODE_ENV"); v != "" {
		// Performance work: more environment for each mm serve and its
		// mm-node, as NAME=value fields (GOMAXPROCS=1).
		cmd.Env = append(cmd.Env, strings.Fields(v)...)
	}
	s := &served{cmd: cmd, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, exited: make(chan error, 1), dir: dir}
	cmd.Stdout = s.stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`^mm serve: listening on (https?://\S+)$`)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.stderr.Write(append(sc.Bytes(), '\n'))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default: // said again: a node that started again (exec)
				}
			}
		}
		_, _ = io.Copy(s.stderr, pipe)
		s.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if os.Getenv("MM_TEST_CPUPROFILES") != "" {
			// Its profile is written as it exits.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-s.exited:
				s.exited <- err
			case <-time.After(time.Minute):
			}
		}
		_ = cmd.Process.Kill()
		<-s.exited
		s.exited <- nil
		for _, race := range mmRaces(s.stderr.String()) {
			t.Errorf("mm serve found a data race in mm's code:\n%s", race)
		}
		if t.Failed() {
			t.Logf("mm serve's stderr:\n%s", s.stderr.String())
		}
	})
	select {
	case s.url = <-addr:
	case err := <-s.exited:
		s.exited <- err // for the cleanup, which waits for it
		t.Fatalf("mm serve exited: %v\n%s", err, s.stderr.String())
	case <-time.After(testwait.Hang):
		t.Fatalf("mm serve did not say where it listens, nor exit, in %v:\n%s", testwait.Hang, s.stderr.String())
	}
	s.ws = "ws" + strings.TrimPrefix(s.url, "http")
	return s
}

// waitExit waits for s to exit and returns what its Wait returned, left
// for the cleanup; it fails the test, naming what, after testwait.Hang.
func (s *served) waitExit(t testing.TB, what string) error {
	t.Helper()
	select {
	case err := <-s.exited:
		s.exited <- err
		return err
	case <-time.After(testwait.Hang):
		t.Fatalf("%s: mm serve did not exit in %v", what, testwait.Hang)
		return nil
	}
}

// project makes a project folder for a session, inside the folder mm
// serve started in: its default serve.roots.
func (s *served) project(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(s.dir, "project-")
	if err != nil {
		t.Fatal(err)
	}
	// Run by root, mm runs the tenants' commands as sandbox.user: the
	// project is theirs.
	return sandboxtest.Own(t, dir)
}

// serveClient is an ACP client of a served mm.
type serveClient struct {
	*acptest.Conn
	served *served
	rec    *acptest.Client
	stream servetest.Stream
}

// dialAs connects to s over WebSocket with token, initialized.
func dialAs(t *testing.T, s *served, token string) *serveClient {
	t.Helper()
	ctx := testwait.Context(t)
	ws, _, err := servetest.DialWebSocket(ctx, s.ws, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := acptest.NewClient()
	conn := acptest.Dial(rec, ws, ws)
	t.Cleanup(func() { _ = ws.Close() })
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	return &serveClient{Conn: conn, served: s, rec: rec, stream: ws}
}

// dial connects over transport ("websocket" or "http") with the test's
// token.
func (s *served) dial(t *testing.T, transport string) *serveClient {
	t.Helper()
	var st servetest.Stream
	if transport == "websocket" {
		ws, _, err := servetest.DialWebSocket(testwait.Context(t), s.ws, serveToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		st = ws
	} else {
		st = servetest.DialHTTP(s.url, serveToken, nil)
	}
	rec := acptest.NewClient()
	conn := acptest.Dial(rec, st, st)
	t.Cleanup(func() { _ = st.Close() })
	return &serveClient{Conn: conn, served: s, rec: rec, stream: st}
}

// open initializes c and opens a session in a temp dir.
func (c *serveClient) open(t *testing.T, ctx context.Context) acp.SessionId {
	t.Helper()
	if _, err := c.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: c.served.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return sess.SessionId
}

func (c *serveClient) ask(ctx context.Context, sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

// TestServe: `mm serve` serves both transports of the RFD to Go clients, a
// whole turn each, and writes nothing on stdout.
func TestServe(t *testing.T) {
	s := startServe(t, "")
	for _, tr := range []string{"websocket", "http"} {
		t.Run(tr, func(t *testing.T) {
			ctx := testwait.Context(t)
			c := s.dial(t, tr)
			sid := c.open(t, ctx)
			resp, err := c.ask(ctx, sid, "ping")
			if err != nil {
				t.Fatal(err)
			}
			if got := acptest.Text(c.rec.Updates(sid)); resp.StopReason != acp.StopReasonEndTurn || got != "pong" {
				t.Errorf("stop %s, text %q", resp.StopReason, got)
			}
		})
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.waitExit(t, "SIGTERM"); err != nil {
		t.Errorf("exit: %v", err)
	}
	if s.stdout.String() != "" {
		t.Errorf("mm serve wrote on stdout: %q", s.stdout.String())
	}
}

// TestServeRefuses: no token, a wrong token and a foreign Origin are
// refused before any ACP; a connection past serve.maxConnections gets 503.
func TestServeRefuses(t *testing.T) {
	s := startServe(t, "serve:\n  maxConnections: 1\n  allowedOrigins: [\"https://editor.example\"]\n")
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`
	post := func(token, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	upgrade := func(token, origin string) int {
		ctx := testwait.Context(t)
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := servetest.DialWebSocket(ctx, s.ws, token, h)
		if err == nil {
			ws.Close()
			return http.StatusSwitchingProtocols
		}
		if resp == nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		name          string
		token, origin string
		want          int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"wrong token", serveToken + "x", "", http.StatusUnauthorized},
		{"foreign origin", serveToken, "https://evil.example", http.StatusForbidden},
	} {
		if got := post(c.token, c.origin); got != c.want {
			t.Errorf("POST, %s: %d, want %d", c.name, got, c.want)
		}
		if got := upgrade(c.token, c.origin); got != c.want {
			t.Errorf("upgrade, %s: %d, want %d", c.name, got, c.want)
		}
	}
	// The listed origin gets in; it holds the one place, so the next
	// connection of either transport is refused.
	ws, _, err := servetest.DialWebSocket(testwait.Context(t), s.ws, serveToken, http.Header{"Origin": {"https://editor.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := post(serveToken, ""); got != http.StatusServiceUnavailable {
		t.Errorf("POST initialize past maxConnections: %d", got)
	}
	if got := upgrade(serveToken, ""); got != http.StatusServiceUnavailable {
		t.Errorf("upgrade past maxConnections: %d", got)
	}
	ws.Close()
	// Its place comes back once it is closed.
	waitUntil(t, "the place of a closed connection back", func() bool { return post(serveToken, "") == http.StatusOK })
}

// TestServeStall: a client that stops reading in the middle of a large
// answer, and never reads again until it is cut, is disconnected for
// serve.stallTimeout, and the server goes on serving others.
func TestServeStall(t *testing.T) {
	testwait.Short(t, "stalled clients of 12 MB answers")
	// 8 s: the load at the end replays the 12 MB answer (its history
	// comes before the load's answer, on the connection's stream over
	// streamable HTTP), which a client built with -race on a busy
	// machine reads slower than 1 MB a second; and under .ci/run, whose
	// packages' tests run beside each other on two cores, that client
	// once read nothing for over 3 s of it (fa27da8), and was cut.
	s := startServeBig(t, "serve:\n  stallTimeout: 8s\n")
	const stalled = "closed: the client read nothing for serve.stallTimeout"
	for i, tr := range []string{"websocket", "http"} {
		t.Run(tr, func(t *testing.T) {
			ctx := testwait.Context(t)
			st, conn := stallingClient(t, s, tr)
			if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
				t.Fatal(err)
			}
			cwd := s.project(t)
			sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			st.pause()
			start := time.Now()
			answered := make(chan error, 1)
			go func() {
				_, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("big")}})
				answered <- err
			}()
			waitLog(t, s, stalled, i+1)
			t.Logf("cut %v after it stopped reading (serve.stallTimeout 8s)", time.Since(start).Round(time.Millisecond))
			st.resume()
			if err := <-answered; err == nil {
				t.Error("the prompt of a client cut off was answered")
			}
			// Others are still served, and the session of the client cut
			// off is loaded back by its token's next connection.
			c := s.dial(t, tr)
			sid := c.open(t, ctx)
			if resp, err := c.ask(ctx, sid, "ping"); err != nil || resp.StopReason != acp.StopReasonEndTurn {
				t.Errorf("after a stall: %v %v", resp, err)
			}
			if _, err := c.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sess.SessionId, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
				t.Errorf("the session of the client cut off does not load: %v", err)
			}
		})
	}
}

// TestServeStallMidAnswer: a WebSocket client that stops reading in the
// middle of a long answer, not before it, is cut off at
// serve.stallTimeout too (issue 28 saw one still connected 8 s later with
// a 1 s timeout, with a client of its own; mm's test client, paused at the
// socket once the answer has begun, is cut in about a second).
func TestServeStallMidAnswer(t *testing.T) {
	testwait.Short(t, "a stalled client of a 12 MB answer")
	s := startServeBig(t, "serve:\n  stallTimeout: 1s\n")
	ctx := testwait.Context(t)
	st, conn := stallingClient(t, s, "websocket")
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("big")}})
	}()
	// The answer has begun: the client stops reading, at once (a pause
	// later would let a fast machine deliver the whole answer first).
	if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(acp.SessionUpdate) bool { return true }); err != nil {
		t.Fatal(err)
	}
	st.pause()
	start := time.Now()
	waitLog(t, s, "closed: the client read nothing for serve.stallTimeout", 1)
	t.Logf("cut %v after it stopped reading (serve.stallTimeout 1s)", time.Since(start).Round(time.Millisecond))
}

// stallable is a client stream whose reading can be paused, as an editor
// that hangs: while paused, nothing more is taken from the socket.
type stallable struct {
	servetest.Stream
	mu     sync.Mutex
	paused chan struct{} // nil when reading
}

func (s *stallable) pause() {
	s.mu.Lock()
	s.paused = make(chan struct{})
	s.mu.Unlock()
}

func (s *stallable) resume() {
	s.mu.Lock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
	s.mu.Unlock()
}

func (s *stallable) Read(p []byte) (int, error) {
	s.wait()
	return s.Stream.Read(p)
}

// wait returns once s is not paused.
func (s *stallable) wait() {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused != nil {
		<-paused
	}
}

func stallingClient(t *testing.T, s *served, transport string) (*stallable, *acptest.Conn) {
	t.Helper()
	st := &stallable{}
	var inner servetest.Stream
	if transport == "websocket" {
		ws, _, err := servetest.DialWebSocket(testwait.Context(t), s.ws, serveToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		inner = ws
	} else {
		// Paused at its sockets (servetest.PausingDialer), not above
		// its transport, which takes whole events.
		tr := &http.Transport{DialContext: servetest.PausingDialer(st.wait)}
		t.Cleanup(tr.CloseIdleConnections)
		inner = servetest.DialHTTP(s.url, serveToken, &http.Client{Transport: tr})
	}
	st.Stream = inner
	conn := acptest.Dial(acptest.NewClient(), st, st)
	t.Cleanup(func() { st.resume(); _ = inner.Close() })
	return st, conn
}

// waitLog waits until mm serve's stderr holds want n times (testwait.Hang
// at most).
func waitLog(t *testing.T, s *served, want string, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%q %d time(s) on stderr", want, n), func() bool { return strings.Count(s.stderr.String(), want) >= n })
}

// TestServeSIGTERM: SIGTERM during a turn that never ends on its own (a
// model that stalls) drains: /readyz answers 503, a new connection is
// refused, the turn gets serve.drainTimeout, the only way out, and then
// ends cancelled, and mm serve exits 0. The drain lasts long enough (10 s)
// for the checks made meanwhile on a loaded machine.
func TestServeSIGTERM(t *testing.T) {
	testwait.Short(t, "a drain of serve.drainTimeout (10 s)")
	s := startServe(t, "serve:\n  drainTimeout: 10s\n")
	ctx := testwait.Context(t)
	ws, _, err := servetest.DialWebSocket(ctx, s.ws, serveToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What the client reads, as it came: acp-go-sdk may report the
	// socket's close rather than an answer that came just before it.
	read := &syncbuf.Buffer{}
	rec := acptest.NewClient()
	conn := acptest.Dial(rec, ws, io.TeeReader(ws, read))
	t.Cleanup(func() { _ = ws.Close() })
	c := &serveClient{Conn: conn, served: s, rec: rec, stream: ws}
	sid := c.open(t, ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.ask(ctx, sid, "slow")
	}()
	if err := c.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, s, "[serve] draining", 1)
	ready, err := http.Get(strings.TrimSuffix(s.url, "/acp") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready.Body.Close()
	if ready.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d", ready.StatusCode)
	}
	if _, resp, err := servetest.DialWebSocket(ctx, s.ws, serveToken, nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new connection while draining: %v %v", resp, err)
	}
	select {
	case <-done:
		if !strings.Contains(read.String(), `"stopReason":"cancelled"`) {
			t.Errorf("the turn did not end cancelled; the client read:\n%s", read.String())
		}
		t.Logf("the turn ended %v after SIGTERM (serve.drainTimeout 10s)", time.Since(signalled).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the turn did not end")
	}
	// The drain's time limit ended the connection, nothing else.
	waitLog(t, s, "closed: the server is shutting down (serve.drainTimeout)", 1)
	if err := s.waitExit(t, "SIGTERM"); err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestServeMakesAToken: with no token configured, mm serve makes one,
// prints it once on stderr, and lets in that token only.
func TestServeMakesAToken(t *testing.T) {
	s := startServeEnv(t, "")
	m := regexp.MustCompile(`this run's token is (\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no token on stderr:\n%s", s.stderr.String())
	}
	if strings.Count(s.stderr.String(), m[1]) != 1 {
		t.Error("the token was printed more than once")
	}
	for tok, want := range map[string]int{m[1]: http.StatusOK, serveToken: http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(s.url, "/acp")+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// TestServeCommandLine: mm serve's flags and the errors it stops on.
func TestServeCommandLine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	for _, c := range []struct {
		name   string
		args   []string
		config string
		env    string
		code   int
		want   string
	}{
		{"help", []string{"-h"}, "", "", 0, "-listen ADDR"},
		{"an argument", []string{"extra"}, "", "", 2, `unexpected argument "extra"`},
		{"a bad key", []string{"-config", cfg}, "serve:\n  maxConnections: 0\n", "", 1, "serve.maxConnections"},
		{"a short MM_SERVE_TOKEN", []string{"-config", cfg}, "model:\n  provider: scripted\n", "MM_SERVE_TOKEN=short", 1, "MM_SERVE_TOKEN"},
		{"a bad address", []string{"-config", cfg, "-listen", "256.0.0.1:1"}, "model:\n  provider: scripted\n", "", 1, "serve.listen"},
		{"a missing certificate", []string{"-config", cfg}, "model:\n  provider: scripted\nserve:\n  tls: {cert: c.pem, key: k.pem}\n", "", 1, "serve.tls"},
	} {
		if err := os.WriteFile(cfg, []byte(c.config), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(mmBin, append([]string{"serve"}, c.args...)...)
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), c.env}
		var stderr, stdout strings.Builder
		cmd.Stderr, cmd.Stdout = &stderr, &stdout
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		if code != c.code || !strings.Contains(stderr.String(), c.want) || stdout.String() != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want exit %d and %q", c.name, code, stderr.String(), stdout.String(), c.code, c.want)
		}
	}
}

// metricsOf reads mm serve's /metrics with the test's token.
func (s *served) metricsOf(t testing.TB) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(s.url, "/acp")+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+serveToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestServeRuntimeMetrics: /metrics counts the sessions open, the turns by
// stop reason with their duration, and the tool calls by tool and status.
func TestServeRuntimeMetrics(t *testing.T) {
	s := startServe(t, "")
	ctx := testwait.Context(t)
	c := s.dial(t, "websocket")
	sid := c.open(t, ctx)
	for _, p := range []string{"ping", "bash"} {
		if res, err := c.ask(ctx, sid, p); err != nil || res.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("%s: %v %v", p, res, err)
		}
	}
	m := s.metricsOf(t)
	for _, want := range []string{
		"mm_sessions_open 1",
		`mm_turns_total{stop_reason="end_turn"} 2`,
		"mm_turn_duration_seconds_count 2",
		`mm_tool_calls_total{status="completed",tool="bash"} 1`,
		`mm_connections_open{transport="websocket"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestServeTokensAndRoots: over the network, a session belongs to its
// token (another cannot load it: it does not exist for them), a session's
// cwd must be inside serve.roots, and a client of the same token that
// reconnects loads its session back with its history.
func TestServeTokensAndRoots(t *testing.T) {
	s := startServe(t, "sessions:\n  enabled: true\nserve:\n  tokens:\n    - {name: alice, token: alice-token-0123456789}\n    - {name: bob, token: bob-token-0123456789ab}\n")
	ctx := testwait.Context(t)
	dial := func(token string) *serveClient { return dialAs(t, s, token) }
	alice := dial("alice-token-0123456789")
	cwd := s.project(t)
	sess, err := alice.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.ask(ctx, sess.SessionId, "ping"); err != nil {
		t.Fatal(err)
	}
	bob := dial("bob-token-0123456789ab")
	var re *acp.RequestError
	if _, err := bob.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sess.SessionId, Cwd: cwd, McpServers: []acp.McpServer{}}); !errors.As(err, &re) || re.Code != -32002 {
		t.Errorf("bob loaded alice's session: %v", err)
	}
	if list, err := bob.ListSessions(ctx, acp.ListSessionsRequest{Cwd: acp.Ptr(cwd)}); err != nil || len(list.Sessions) != 0 {
		t.Errorf("bob lists %v, %v", list.Sessions, err)
	}
	if _, err := bob.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}); !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Error(), "serve.roots") {
		t.Errorf("a cwd outside serve.roots: %v", err)
	}
	// Alice's client goes away; a new one of hers takes the session up.
	_ = alice.stream.Close()
	again := dial("alice-token-0123456789")
	if _, err := again.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sess.SessionId, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("alice's reconnect: %v", err)
	}
	if got := acptest.Text(again.rec.Updates(sess.SessionId)); got != "pong" {
		t.Errorf("the load replayed %q, want the earlier answer", got)
	}
}
