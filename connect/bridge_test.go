package connect

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
)

// A peer plays mm serve's part for one connection of mm connect's, frame
// by frame, as the test says: mm serve itself, with resumes and reopens,
// is cmd/mm's TestConnect* tests.
type peer struct {
	ws  *websocket.Conn
	ctx context.Context
}

// editor is mm connect's stdio as an editor holds it, and Run's end.
type editor struct {
	in     *io.PipeWriter
	lines  chan string
	stderr *syncbuf.Buffer
	ran    chan struct{} // closed once Run has returned err
	err    error
}

// bridged runs connect.Run between a test editor and a test peer.
func bridged(t *testing.T) (*editor, *peer) { return bridgedMax(t, 1<<20) }

// bridgedMax is bridged with acp.maxLineBytes max.
func bridgedMax(t *testing.T, max int) (*editor, *peer) {
	t.Helper()
	ctx := testwait.Context(t)
	accepted := make(chan *websocket.Conn, 1)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.SetReadLimit(-1)
		accepted <- ws
		<-done
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	u, err := URL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	e := &editor{in: inW, lines: make(chan string, 100), stderr: &syncbuf.Buffer{}, ran: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
		close(e.lines)
	}()
	go func() {
		e.err = Run(ctx, Options{URL: u, MaxLine: max, Stdin: inR, Stdout: outW, Stderr: e.stderr})
		outW.Close()
		close(e.ran)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-e.ran:
		case <-time.After(testwait.Hang):
			t.Errorf("Run did not return")
		}
		if t.Failed() {
			t.Logf("mm connect's stderr:\n%s", e.stderr.String())
		}
	})
	select {
	case ws := <-accepted:
		t.Cleanup(func() { _ = ws.CloseNow() })
		return e, &peer{ws: ws, ctx: ctx}
	case <-ctx.Done():
		t.Fatal("mm connect did not connect")
	}
	return nil, nil
}

func (e *editor) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(e.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// next is the next line mm connect writes on stdout.
func (e *editor) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-e.lines:
		if !ok {
			t.Fatal("stdout ended")
		}
		return l
	case <-time.After(testwait.Hang):
		t.Fatal("nothing on stdout")
	}
	return ""
}

// read is the next frame mm connect sends.
func (p *peer) read(t *testing.T) string {
	t.Helper()
	_, b, err := p.ws.Read(p.ctx)
	if err != nil {
		t.Fatalf("the peer's read: %v", err)
	}
	return string(b)
}

func (p *peer) write(t *testing.T, frame string) {
	t.Helper()
	if err := p.ws.Write(p.ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

// initialized has the editor initialize the connection: its first frame.
func initialized(t *testing.T, e *editor, p *peer) {
	t.Helper()
	e.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	if got := p.read(t); gjson.Get(got, "method").String() != "initialize" {
		t.Fatalf("the first frame: %s", got)
	}
	p.write(t, "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {\"protocolVersion\": 1}\n}")
	if got := e.next(t); got != `{   "jsonrpc": "2.0",   "id": 1,   "result": {"protocolVersion": 1} }` {
		t.Fatalf("a pretty-printed answer on stdout: %q, want it on one line, its line breaks spaces", got)
	}
}

// TestDrainWaitsForEachExactID: at the end of stdin mm connect cancels
// the prompts in flight and waits for every request it sent, each by its
// exact id, then closes the socket as the client leaving (1000, and why).
// Keyed through a float64, requests 2^53 and 2^53+1 were one: the first
// answer marked both answered, and mm connect ended before the second
// prompt's answer came down.
func TestDrainWaitsForEachExactID(t *testing.T) {
	e, p := bridged(t)
	initialized(t, e, p)
	e.send(t, `{"jsonrpc":"2.0","id":9007199254740992,"method":"session/prompt","params":{"sessionId":"a","prompt":[]}}`)
	e.send(t, `{"jsonrpc":"2.0","id":9007199254740993,"method":"session/prompt","params":{"sessionId":"b","prompt":[]}}`)
	p.read(t)
	p.read(t)
	p.write(t, `{"jsonrpc":"2.0","id":9007199254740992,"result":{"stopReason":"end_turn"}}`)
	if got := e.next(t); !strings.Contains(got, `9007199254740992`) {
		t.Fatalf("stdout: %s", got)
	}
	e.in.Close()
	cancel := p.read(t)
	if m := gjson.GetMany(cancel, "method", "params.sessionId", "id"); m[0].String() != "session/cancel" || m[1].String() != "b" || m[2].Exists() {
		t.Errorf("at the end of stdin mm connect sent %s, want session b's prompt cancelled", cancel)
	}
	select {
	case <-e.ran:
		t.Fatalf("Run returned (%v) with a prompt unanswered", e.err)
	case <-time.After(100 * time.Millisecond):
	}
	p.write(t, `{"jsonrpc":"2.0","id":9007199254740993,"result":{"stopReason":"cancelled"}}`)
	if got := e.next(t); got != `{"jsonrpc":"2.0","id":9007199254740993,"result":{"stopReason":"cancelled"}}` {
		t.Errorf("the second answer on stdout: %s", got)
	}
	_, _, err := p.ws.Read(p.ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the socket ended with %v, want a close frame 1000", err)
	}
	var ce websocket.CloseError
	if ok := asClose(err, &ce); !ok || ce.Reason != "the editor closed mm connect's stdin" {
		t.Errorf("the close's reason: %+v", ce)
	}
	<-e.ran
	if e.err != nil {
		t.Errorf("Run: %v", e.err)
	}
}

// TestRelay: the server's request goes to the editor as the server wrote
// it, and the editor's answer to the server as the editor wrote it; an
// answer to nothing the server asked goes nowhere; the server's answer
// with a null id (to something it could not read) goes to the editor; a
// line that is no JSON-RPC message is answered by mm connect, as mm -acp
// answers it, and not sent on.
func TestRelay(t *testing.T) {
	e, p := bridged(t)
	initialized(t, e, p)
	ask := `{"jsonrpc":"2.0","id":"mm-1","method":"session/request_permission","params":{"sessionId":"a","options":[]}}`
	p.write(t, ask)
	if got := e.next(t); got != ask {
		t.Errorf("the server's request on stdout: %s", got)
	}
	e.send(t, `{"jsonrpc":"2.0","id":"mm-9","result":{}}`)
	e.send(t, "not json")
	if got := e.next(t); gjson.Get(got, "error.code").Int() != -32700 || gjson.Get(got, "id").Type != gjson.Null {
		t.Errorf("a line that is not JSON answered %s", got)
	}
	answer := `{"id":"mm-1", "jsonrpc":"2.0","result":{"outcome":{"outcome":"cancelled"}}}`
	e.send(t, answer)
	if got := p.read(t); got != answer {
		t.Errorf("the server got %s, want the editor's answer as written", got)
	}
	e.send(t, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`)
	if got := p.read(t); gjson.Get(got, "id").Int() != 2 {
		t.Errorf("the server got %s, want session/new (nothing between)", got)
	}
	null := `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`
	p.write(t, null)
	if got := e.next(t); got != null {
		t.Errorf("stdout: %s", got)
	}
}

func asClose(err error, ce *websocket.CloseError) bool {
	for err != nil {
		if c, ok := err.(websocket.CloseError); ok {
			*ce = c
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// TestFrameTooLong: a frame longer than mm connect reads (twice
// acp.maxLineBytes, at least minFrame) is dropped, saying so on stderr,
// and the editor's request it answered is answered with an error; the
// connection goes on.
func TestFrameTooLong(t *testing.T) {
	defer func(m int) { minFrame = m }(minFrame)
	minFrame = 2 << 10
	e, p := bridgedMax(t, 1<<10)
	initialized(t, e, p)
	e.send(t, `{"jsonrpc":"2.0","id":5,"method":"session/list","params":{}}`)
	p.read(t)
	p.write(t, `{"jsonrpc":"2.0","id":5,"result":{"sessions":[],"pad":"`+strings.Repeat("x", 3<<10)+`"}}`)
	got := e.next(t)
	if m := gjson.GetMany(got, "id", "error.code", "error.message"); m[0].Int() != 5 || m[1].Int() != -32603 ||
		!strings.Contains(m[2].String(), "longer than mm connect reads (2KiB: twice acp.maxLineBytes, 2KiB at least); it was dropped") {
		t.Errorf("the request whose answer was too long got %s", got)
	}
	if !strings.Contains(e.stderr.String(), "the server sent a message of 3") {
		t.Errorf("stderr: %s", e.stderr.String())
	}
	p.write(t, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a"}}`)
	if got := e.next(t); !strings.Contains(got, "session/update") {
		t.Errorf("after the long frame: %s", got)
	}
}
