package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/cutproxy"
	"github.com/mm-agent/mm/internal/testwait"
)

// countText is what the "count" rule streams: 80 numbered words at 20 a
// second, 4 s of streaming in which to drop the connection.
func countText() string {
	var b strings.Builder
	for i := 1; i <= 80; i++ {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return strings.TrimSpace(b.String())
}

func countScript() string {
	return serveScript + fmt.Sprintf("  - match: \"^count$\"\n    steps: [{text: %q, tokensPerSec: 20}]\n", countText())
}

// behindProxy is mm connect to s through a proxy the test cuts or stalls,
// trying to resume for resumeFor.
func behindProxy(t *testing.T, s *served, resumeFor string) (*acptest.Conn, *cutproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(s.ws)
	if err != nil {
		t.Fatal(err)
	}
	p := cutproxy.Start(t, u.Host)
	u.Host = p.Addr()
	cfg := filepath.Join(t.TempDir(), "connect.yaml")
	if err := os.WriteFile(cfg, []byte("serve:\n  resumeTimeout: "+resumeFor+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return connectTo(t, u.String(), "MM_TOKEN="+serveToken, "MM_CONFIG="+cfg), p
}

// TestConnectResumes: the network under mm connect drops in the middle of
// a streaming turn — cut for 1 s, cut for 10 s, or stalled (a black hole
// that mm connect finds with its pings) — and the editor sees nothing of
// it: the turn goes on on the server, mm connect resumes the connection,
// and the editor gets every word of the answer once, in order, and its
// end_turn, with no error. A request the editor writes during the drop
// waits and is answered.
func TestConnectResumes(t *testing.T) {
	testwait.Short(t, "drops of up to 10 s")
	for _, c := range []struct {
		name string
		drop func(p *cutproxy.Proxy)
	}{
		{"cut 1s", func(p *cutproxy.Proxy) { p.Cut(); time.Sleep(time.Second); p.Restore() }},
		{"cut 10s", func(p *cutproxy.Proxy) { p.Cut(); time.Sleep(10 * time.Second); p.Restore() }},
		{"stalled", func(p *cutproxy.Proxy) { p.Stall() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, countScript(), "", "MM_SERVE_TOKEN="+serveToken)
			conn, p := behindProxy(t, s, "30s")
			countThroughDrop(t, conn, s.project(t), c.name, func() { c.drop(p) }, func(ctx context.Context, sid acp.SessionId) {
				// A request written during the drop waits, then goes.
				if _, err := conn.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: "yolo"}); err != nil {
					t.Fatalf("set_mode written during the drop: %v", err)
				}
			})
			if !strings.Contains(s.stderr.String(), "resumed after frame") {
				t.Errorf("the server did not log the resume:\n%s", s.stderr.String())
			}
			if strings.Contains(s.stderr.String(), "cancelled") {
				t.Errorf("a turn was cancelled on the server:\n%s", s.stderr.String())
			}
		})
	}
}

// countThroughDrop runs the "count" turn through mm connect in a new
// session in project, drops the network once the fifth word has arrived
// (drop, then during while the turn runs, when set), and checks that the
// editor got every word once, in order, and end_turn, that mm connect said
// it resumed, and that the next turn is answered.
func countThroughDrop(t *testing.T, conn *acptest.Conn, project, name string, drop func(), during func(context.Context, acp.SessionId)) {
	t.Helper()
	ctx, sess := openSessionIn(t, conn, project)
	answered := make(chan acp.PromptResponse, 1)
	failed := make(chan error, 1)
	go func() {
		r, err := conn.Ask(ctx, sess.SessionId, "count")
		if err != nil {
			failed <- err
			return
		}
		answered <- r
	}()
	if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(u acp.SessionUpdate) bool {
		return u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil && strings.Contains(u.AgentMessageChunk.Content.Text.Text, "w5")
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	drop()
	if during != nil {
		during(ctx, sess.SessionId)
	}
	select {
	case err := <-failed:
		t.Fatalf("the prompt failed: %v\nmm connect: %s", err, conn.Stderr.String())
	case r := <-answered:
		if r.StopReason != acp.StopReasonEndTurn {
			t.Errorf("stop reason %s, want end_turn", r.StopReason)
		}
	}
	t.Logf("%s: the turn ended %v after the drop began", name, time.Since(start).Round(time.Millisecond))
	if got, want := acptest.Text(conn.Client.Updates(sess.SessionId)), countText(); got != want {
		t.Errorf("the editor got\n%q\nwant every word once, in order:\n%q", got, want)
	}
	for _, l := range strings.Split(conn.Stderr.String(), "\n") {
		if strings.Contains(l, "resum") {
			t.Logf("%s", l)
		}
	}
	if !strings.Contains(conn.Stderr.String(), "mm connect: resumed after ") {
		t.Errorf("mm connect did not say it resumed:\n%s", conn.Stderr.String())
	}
	if r, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Errorf("the next turn: %v %v", r, err)
	}
}

// TestConnectResumePastTheWindow: a drop during which the server writes
// more than serve.resumeWindowBytes cannot be resumed: the server answers
// 409. mm connect then opens a new connection, sends the editor's
// initialize again and resumes the editor's session on it: the prompt
// that was in flight is answered with an error that says its answer was
// lost, and the editor's next prompt in the same session is answered, the
// agent process never having stopped.
func TestConnectResumePastTheWindow(t *testing.T) {
	testwait.Short(t, "a drop of 5 s")
	s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, countScript(), "serve:\n  resumeWindowBytes: 1KiB\n", "MM_SERVE_TOKEN="+serveToken)
	conn, p := behindProxy(t, s, "30s")
	ctx, sess := openSessionIn(t, conn, s.project(t))
	failed := make(chan error, 1)
	go func() {
		_, err := conn.Ask(ctx, sess.SessionId, "count")
		failed <- err
	}()
	if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	time.Sleep(5 * time.Second) // 100 words, each a frame of about 200 bytes
	p.Restore()
	select {
	case err := <-failed:
		if err == nil || !strings.Contains(err.Error(), "the answer to this request was lost") {
			t.Errorf("the prompt in flight: %v, want the error that says its answer was lost", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatalf("the prompt in flight was never answered\n%s", conn.Stderr.String())
	}
	if r, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the next prompt in the same session: %v %v\n%s", r, err, conn.Stderr.String())
	}
	want := "the server cannot resume the connection (409 Conflict); opened a new connection, resumed 1 session(s), and answered 1 request(s) in flight with an error"
	if !strings.Contains(conn.Stderr.String(), want) {
		t.Errorf("mm connect's stderr:\n%s\nwant a line with %q", conn.Stderr.String(), want)
	}
	for _, l := range strings.Split(conn.Stderr.String(), "\n") {
		if strings.Contains(l, "mm connect") {
			t.Logf("%s", l)
		}
	}
}

// TestConnectReopensOnARestartedServer: mm serve is killed and started
// again (on another port, where a balancer sends mm connect) while the
// editor is idle between turns: the new server knows nothing of the
// connection (404), so mm connect opens a new one and resumes the
// editor's session from its stored history, and the editor's next prompt
// in that session is answered as if nothing had happened.
func TestConnectReopensOnARestartedServer(t *testing.T) {
	dir := t.TempDir()
	extra := "sessions:\n  enabled: true\n"
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, serveScript, extra, "MM_SERVE_TOKEN="+serveToken)
	conn, p := behindProxy(t, s, "30s")
	ctx, sess := openSessionIn(t, conn, s.project(t))
	if r, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %v %v", r, err)
	}
	p.Cut()
	_ = s.cmd.Process.Kill()
	_ = s.waitExit(t, "killed")
	again := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, serveScript, extra, "MM_SERVE_TOKEN="+serveToken)
	p.Retarget(hostOf(t, again.url))
	p.Restore()
	conn.Client.Reset()
	if r, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the next prompt after the restart: %v %v\n%s", r, err, conn.Stderr.String())
	}
	if got := acptest.Text(conn.Client.Updates(sess.SessionId)); got != "pong" {
		t.Errorf("the editor got %q, want pong", got)
	}
	want := "the server cannot resume the connection (404 Not Found); opened a new connection, resumed 1 session(s), and answered 0 request(s) in flight"
	if !strings.Contains(conn.Stderr.String(), want) {
		t.Errorf("mm connect's stderr:\n%s\nwant a line with %q", conn.Stderr.String(), want)
	}
}

// TestInterruptLikeACP: SIGINT (Ctrl-C in the terminal that started the
// editor's agent) to mm connect does what it does to mm -acp: the prompt
// in flight is answered cancelled, and the process exits 0. Before, mm
// connect closed the socket at once and answered nothing (acpx: "ACP
// connection closed").
func TestInterruptLikeACP(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(serveScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(scriptedModel), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"mm -acp", []string{"-acp", "-config", cfg}},
		{"mm connect", []string{"connect", s.ws}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(mmBin, c.args...)
			cmd.Dir = dir
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "MM_TOKEN=" + serveToken}
			conn, err := acptest.Process(cmd)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close(5 * time.Second); _ = cmd.Process.Kill() })
			ctx, sess := openSessionIn(t, conn, s.project(t))
			answered := make(chan acp.PromptResponse, 1)
			go func() {
				r, err := conn.Ask(ctx, sess.SessionId, "slow")
				if err != nil {
					t.Errorf("the prompt: %v", err)
				}
				answered <- r
			}()
			if err := conn.Client.WaitUpdate(ctx, sess.SessionId, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if r := <-answered; r.StopReason != acp.StopReasonCancelled {
				t.Errorf("stop reason %q, want cancelled", r.StopReason)
			}
			if err := conn.Wait(testwait.Hang); err != nil {
				t.Errorf("%s after SIGINT: %v, want exit 0\n%s", c.name, err, conn.Stderr.String())
			}
		})
	}
}

// TestServeTokenAsSubprotocol: a browser cannot set Authorization on a
// WebSocket, so mm serve takes the token as a subprotocol too
// (mm-token.<token>), and answers with "acp" when it is offered; a wrong
// token there is refused as in the header.
func TestServeTokenAsSubprotocol(t *testing.T) {
	s := startServe(t, "")
	ctx := testwait.Context(t)
	ws, resp, err := websocket.Dial(ctx, s.ws, &websocket.DialOptions{Subprotocols: []string{"acp", "mm-token." + serveToken}})
	if err != nil {
		t.Fatalf("the token as a subprotocol: %v", err)
	}
	defer ws.CloseNow()
	if ws.Subprotocol() != "acp" {
		t.Errorf("subprotocol %q, want acp", ws.Subprotocol())
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)); err != nil {
		t.Fatal(err)
	}
	_, b, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"protocolVersion":1`) {
		t.Errorf("initialize: %s %v", b, err)
	}
	_ = resp
	_, resp, err = websocket.Dial(ctx, s.ws, &websocket.DialOptions{Subprotocols: []string{"mm-token.wrong-token-0123456789"}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("a wrong token as a subprotocol: %v %v", resp, err)
	}
}

// sseEvent is one event of an SSE stream: its id and its data.
type sseEvent struct {
	id   uint64
	data string
}

// sseGet opens an SSE stream of a served mm's HTTP connection (the
// session's when session is set), after Last-Event-ID last when it is
// set, and sends its events on a channel until the stream ends or ctx
// does.
func sseGet(ctx context.Context, t *testing.T, url, conn, session, last string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+serveToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Acp-Connection-Id", conn)
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp
	}
	out := make(chan sseEvent, 1024)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var e sseEvent
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "id: "):
				e.id, _ = strconv.ParseUint(strings.TrimPrefix(l, "id: "), 10, 64)
			case strings.HasPrefix(l, "data: "):
				e.data = strings.TrimPrefix(l, "data: ")
			case l == "" && e.data != "":
				out <- e
				e = sseEvent{}
			}
		}
	}()
	return out, resp
}

// ssePost posts one message to a served mm's HTTP connection.
func ssePost(t *testing.T, url, conn, session, msg string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(msg))
	req.Header.Set("Authorization", "Bearer "+serveToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestHTTPStreamResumes: over streamable HTTP, every SSE event has an id,
// and a session's stream whose TCP connection is cut or stalled (a proxy)
// in the middle of a streaming turn, opened again 1 s later with
// Last-Event-ID,
// gets every event after it once, in order: the turn's words with no gap
// and none twice, then the prompt's answer. A Last-Event-ID the stream
// does not hold is answered 409.
func TestHTTPStreamResumes(t *testing.T) {
	for _, c := range []struct {
		name string
		drop func(p *cutproxy.Proxy)
	}{
		{"cut", func(p *cutproxy.Proxy) { p.Cut(); time.Sleep(time.Second); p.Restore() }},
		// The server still writes to the stalled stream: the GET that
		// resumes takes it over.
		{"stalled", func(p *cutproxy.Proxy) { p.Stall(); time.Sleep(time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, countScript(), "", "MM_SERVE_TOKEN="+serveToken)
			httpStreamResumes(t, s, s, c.drop)
		})
	}
}

// httpStreamResumes opens an HTTP connection on s and streams a turn
// through a proxy to s, which drop cuts or stalls; the stream is opened
// again through the proxy, and the 409 asked of via (s, or another node of
// its cluster to which drop points the proxy).
func httpStreamResumes(t *testing.T, s, via *served, drop func(p *cutproxy.Proxy)) {
	ctx := testwait.Context(t)
	resp := ssePost(t, s.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	conn := resp.Header.Get("Acp-Connection-Id")
	resp.Body.Close()
	if conn == "" {
		t.Fatalf("initialize: %s", resp.Status)
	}
	connEvents, _ := sseGet(ctx, t, s.url, conn, "", "")
	ssePost(t, s.url, conn, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, s.project(t))).Body.Close()
	var sid string
	for e := range connEvents {
		if sid = gjson.Get(e.data, "result.sessionId").String(); sid != "" {
			break
		}
	}
	// The session's stream goes through a proxy the test cuts.
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	p := cutproxy.Start(t, u.Host)
	u.Host = p.Addr()
	proxied := u.String()
	events, _ := sseGet(ctx, t, proxied, conn, sid, "")
	ssePost(t, s.url, conn, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"count"}]}}`, sid)).Body.Close()
	var got strings.Builder
	var ids []uint64
	read := func(e sseEvent) (done bool) {
		ids = append(ids, e.id)
		got.WriteString(gjson.Get(e.data, "params.update.content.text").String())
		return gjson.Get(e.data, "id").Int() == 3
	}
	for e := range events {
		read(e)
		if strings.Contains(got.String(), "w5") {
			break
		}
	}
	drop(p) // the turn goes on
	last := strconv.FormatUint(ids[len(ids)-1], 10)
	if _, resp := sseGet(ctx, t, via.url, conn, sid, "99999"); resp.StatusCode != http.StatusConflict {
		t.Errorf("a Last-Event-ID the stream never had: %s, want 409", resp.Status)
	}
	events, resp = sseGet(ctx, t, proxied, conn, sid, last)
	if events == nil {
		t.Fatalf("the stream after Last-Event-ID %s: %s", last, resp.Status)
	}
	answered := false
	for e := range events {
		if read(e) {
			answered = true
			break
		}
	}
	if !answered {
		t.Fatal("the prompt's answer did not come on the stream")
	}
	if got.String() != countText() {
		t.Errorf("the client got\n%q\nwant every word once, in order:\n%q", got.String(), countText())
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Errorf("event ids %v: a gap or a repeat at %d", ids, i)
			break
		}
	}
	t.Logf("%d events, ids %d to %d, the stream cut after id %s", len(ids), ids[0], ids[len(ids)-1], last)
}

// TestHTTPStreamPastTheWindow: a session stream whose network stalls
// while mm writes more than serve.resumeWindowBytes to it cannot be
// resumed: the GET with the last Last-Event-ID the client read is
// answered 409, and the client's way back, a new connection's
// session/load, replays the whole turn from the stored history. (A stream
// cut at once loses nothing: what mm writes once it knows the GET is gone
// waits for the next GET, up to MaxBufferedBytes; only what went into a
// socket that never delivered it is bounded by the window.)
func TestHTTPStreamPastTheWindow(t *testing.T) {
	testwait.Short(t, "a drop of 5 s")
	s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, countScript(), "serve:\n  resumeWindowBytes: 1KiB\nsessions:\n  enabled: true\n", "MM_SERVE_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	open := func() (string, <-chan sseEvent) {
		resp := ssePost(t, s.url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
		resp.Body.Close()
		conn := resp.Header.Get("Acp-Connection-Id")
		events, _ := sseGet(ctx, t, s.url, conn, "", "")
		return conn, events
	}
	conn, connEvents := open()
	cwd := s.project(t)
	ssePost(t, s.url, conn, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, cwd)).Body.Close()
	var sid string
	for e := range connEvents {
		if sid = gjson.Get(e.data, "result.sessionId").String(); sid != "" {
			break
		}
	}
	p := cutproxy.Start(t, hostOf(t, s.url))
	proxied := strings.Replace(s.url, hostOf(t, s.url), p.Addr(), 1)
	events, _ := sseGet(ctx, t, proxied, conn, sid, "")
	ssePost(t, s.url, conn, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"count"}]}}`, sid)).Body.Close()
	var last uint64
	for e := range events {
		last = e.id
		if strings.Contains(gjson.Get(e.data, "params.update.content.text").String(), "w3") {
			break
		}
	}
	p.Stall()
	time.Sleep(5 * time.Second) // the rest of the 80 words, far more than 1 KiB, into the black hole
	if _, resp := sseGet(ctx, t, proxied, conn, sid, strconv.FormatUint(last, 10)); resp.StatusCode != http.StatusConflict {
		t.Fatalf("a resume past the window: %s, want 409", resp.Status)
	}
	// The way back: a new connection loads the session; its history comes
	// before the load's answer, on the connection's stream.
	conn2, conn2Events := open()
	ssePost(t, s.url, conn2, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`, sid, cwd)).Body.Close()
	var replayed strings.Builder
	for e := range conn2Events {
		if gjson.Get(e.data, "id").Int() == 2 {
			if msg := gjson.Get(e.data, "error.message").String(); msg != "" {
				t.Fatalf("session/load: %s", msg)
			}
			break
		}
		if gjson.Get(e.data, "params.update.sessionUpdate").String() == "agent_message_chunk" {
			replayed.WriteString(gjson.Get(e.data, "params.update.content.text").String())
		}
	}
	if !strings.Contains(replayed.String(), countText()) {
		t.Errorf("the load replayed %q, want the whole answer", replayed.String())
	}
}
