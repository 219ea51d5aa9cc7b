package serve_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/serve/servetest"
)

// wsRaw is a WebSocket spoken by hand.
type wsRaw struct {
	t  *testing.T
	ws *servetest.WebSocket
	r  *bufio.Reader
}

func (e *env) wsRaw() *wsRaw {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := servetest.DialWebSocket(ctx, e.ws, token, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.Header.Get("Acp-Connection-Id") == "" {
		e.t.Error("the 101 names no Acp-Connection-Id")
	}
	e.t.Cleanup(func() { _ = ws.Close() })
	return &wsRaw{t: e.t, ws: ws, r: bufio.NewReaderSize(ws, 1<<20)}
}

func (w *wsRaw) send(frame string) {
	w.t.Helper()
	if err := w.ws.WriteFrame(websocket.MessageText, []byte(frame)); err != nil {
		w.t.Fatal(err)
	}
}

// read returns the next message, or the error that ended the socket.
func (w *wsRaw) read() (string, error) {
	line, err := w.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// TestWebSocketBeforeInitialize: as in the TypeScript SDK's server, the
// first request must be initialize with an id.
func TestWebSocketBeforeInitialize(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name, frame string
		code        int
	}{
		{"another request first", `{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}`, int(websocket.StatusProtocolError)},
		{"initialize with a null id", `{"jsonrpc":"2.0","id":null,"method":"initialize","params":{}}`, int(websocket.StatusProtocolError)},
	} {
		w := e.wsRaw()
		w.send(`{"jsonrpc":"2.0","id":5,"result":{}}`) // an answer to nothing: ignored
		w.send(`{"jsonrpc":"2.0"}`)                    // not a message: answered
		if m, err := w.read(); err != nil || gjson.Get(m, "error.code").Int() != -32600 || gjson.Get(m, "id").Type != gjson.Null {
			t.Errorf("%s: not a message: %s %v", c.name, m, err)
		}
		w.send(c.frame)
		if _, err := w.read(); servetest.CloseStatus(err) != c.code {
			t.Errorf("%s: the socket ended with %v, want close %d", c.name, err, c.code)
		}
	}
}

// TestWebSocketFrames: frames that are not one JSON-RPC message are
// answered, and the connection goes on; a message may be pretty-printed.
func TestWebSocketFrames(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, c *configs.Config) {
		o.MaxMessageBytes = 4 << 10
		c.Sessions.Enabled = true
	})
	w := e.wsRaw()
	w.send("{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"initialize\",\n  \"params\": {\"protocolVersion\": 1}\n}")
	if m, _ := w.read(); gjson.Get(m, "result.protocolVersion").Int() != 1 {
		t.Fatalf("initialize: %s", m)
	}
	if err := w.ws.WriteFrame(websocket.MessageBinary, []byte(`{"jsonrpc":"2.0","id":9,"method":"session/list"}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, frame, want string
	}{
		{"not JSON", `{"jsonrpc":`, `"code":-32700`},
		{"a batch", `[{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}]`, `"code":-32600`},
		{"a second initialize", `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":1}}`, `Initialize not allowed on existing connection`},
		{"too long", `{"jsonrpc":"2.0","id":4,"method":"session/list","params":{"x":"` + strings.Repeat("a", 8<<10) + `"}}`, `longer than serve.maxMessageBytes (4KiB)`},
		{"mm's own errors", `{"jsonrpc":"2.0","id":5,"method":"no/such","params":{}}`, `"code":-32601`},
		{"pretty-printed", "{\n\t\"jsonrpc\": \"2.0\",\n\t\"id\": 6,\n\t\"method\": \"session/list\",\n\t\"params\": {}\n}", `"sessions":`},
	} {
		w.send(c.frame)
		m, err := w.read()
		if err != nil || !strings.Contains(m, c.want) {
			t.Errorf("%s: %s %v, want %s", c.name, m, err, c.want)
		}
		if c.name == "too long" && gjson.Get(m, "id").Int() != 4 {
			t.Errorf("too long: answered with id %s", gjson.Get(m, "id").Raw)
		}
	}
	if m := e.stderr.String(); !strings.Contains(m, "binary WebSocket frames are ignored") {
		t.Errorf("the binary frame was not noted:\n%s", m)
	}
}

// TestWebSocketNoInitialize: a socket that sends no initialize within the
// stall timeout is closed with 1008, giving its place back.
func TestWebSocketNoInitialize(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) {
		o.StallTimeout = 300 * time.Millisecond
		o.MaxConnections = 1
	})
	w := e.wsRaw()
	if _, err := w.read(); servetest.CloseStatus(err) != int(websocket.StatusPolicyViolation) {
		t.Errorf("ended with %v, want 1008", err)
	}
	waitFor(t, func() bool { return strings.Contains(e.stderr.String(), "no initialize within serve.stallTimeout") })
	// The place comes back.
	waitFor(t, func() bool {
		ws, _, err := servetest.DialWebSocket(context.Background(), e.ws, token, nil)
		if err == nil {
			ws.Close()
		}
		return err == nil
	})
}

// TestWebSocketClientLeavesMidTurn: a client that closes its socket while
// a turn streams leaves mm's last writes nowhere to go: they are dropped
// at once, and the connection ends. (Issue 42: the first write that
// failed took the connection's lock a second time, and mm's writer waited
// for itself for ever: the connection ended only when mm gave up on a
// client that "did not read", its goroutines never; a reader or a resume
// that came for the lock then waited for ever too, and a SIGTERM'd server
// drained with no connection left.)
func TestWebSocketClientLeavesMidTurn(t *testing.T) {
	for range 3 {
		e := newEnv(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
		c := e.dial(serve.WebSocket, token)
		sid := c.start(t, ctx)
		go func() { _, _ = c.ask(ctx, sid, "slow") }()
		if err := c.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
			t.Fatal(err)
		}
		_ = c.stream.Close() // the turn's cancelled answer is written after
		waitFor(t, func() bool { return strings.Contains(e.stderr.String(), "connection of alice closed: the client left") })
		if err := e.stop(testwait.Hang); err != nil {
			t.Fatalf("stop: %v", err)
		}
		cancel()
		if log := e.stderr.String(); strings.Contains(log, "did not read the last updates") {
			t.Fatalf("mm's writer waited on a client that had left:\n%s", log)
		}
	}
}

// TestResumeWhileTheReaderWaits: a resume takes a connection from its old
// socket even when that socket's reader waits for mm to take a message
// (mm's reader waits itself, acp.maxPending requests unanswered): the old
// reader stops waiting, the message it held is not counted taken
// (Acp-Received), and the connection goes on on the new socket; the
// server drains and stops. (Issue 42: the resume waited
// serve.messageTimeout for the old reader and was refused 503, leaving
// the connection with no one to end it: the server then drained for
// ever.)
func TestResumeWhileTheReaderWaits(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, c *configs.Config) {
		o.MessageTimeout = 2 * time.Second // how long a resume waits for the old reader
		c.ACP.MaxPending = 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	auth := http.Header{"Authorization": {"Bearer " + token}, "Acp-Resume": {"1"}}
	ws, resp, err := websocket.Dial(ctx, e.ws, &websocket.DialOptions{HTTPHeader: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	id := resp.Header.Get("Acp-Connection-Id")
	frames := make(chan string, 1024)
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				close(frames)
				return
			}
			frames <- string(b)
		}
	}()
	read := 0
	next := func(what string) string {
		t.Helper()
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatalf("the socket ended before %s", what)
				}
				read++
				if strings.Contains(f, what) {
					return f
				}
			case <-ctx.Done():
				t.Fatalf("no %s", what)
			}
		}
	}
	send := func(msg string) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`)
	next(`"id":0`)
	send(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"` + t.TempDir() + `","mcpServers":[]}}`)
	sid := gjson.Get(next(`"id":1`), "result.sessionId").Str
	send(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"slow"}]}}`)
	next("agent_message_chunk")
	// The one place is the prompt's: mm's reader takes id 3 and waits
	// with it; the socket's reader waits with id 4 for mm to take it.
	list := `{"jsonrpc":"2.0","id":3,"method":"session/list","params":{}}`
	send(list)
	send(strings.Replace(list, `"id":3`, `"id":4`, 1))
	// Both are read, each holding its room (its buffer of 512 bytes, what
	// decoding it may take).
	var v jsonrpc.Values
	_, _ = v.Write([]byte(list))
	each := 512 + int(jsonrpc.DecodeBytes(len(list), v.N()))
	waitFor(t, func() bool { return incomingBytes(t, e) >= 2*each })
	h := http.Header{"Authorization": {"Bearer " + token}, "Acp-Connection-Id": {id}, "Last-Event-ID": {strconv.Itoa(read)}}
	again, resp, err := websocket.Dial(ctx, e.ws, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("the resume: %d %v", status, err)
	}
	defer again.CloseNow()
	if got := resp.Header.Get("Acp-Received"); got != "3" {
		t.Errorf("Acp-Received %q, want 3: session/new, the prompt and the first list; the second is to be sent again", got)
	}
	if err := e.stop(testwait.Hang); err != nil {
		t.Fatalf("the server did not stop: %v", err)
	}
}
