package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pipeConn is a Conn on the two ends of an in-memory stream: the test
// writes the peer's lines on in and reads what the Conn writes on out.
type pipeConn struct {
	c   *Conn
	in  *io.PipeWriter
	out *lineReader
	err chan error
}

type lineReader struct {
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

func (l *lineReader) Write(o Out) error {
	l.mu.Lock()
	l.lines = append(l.lines, string(o.Data))
	l.mu.Unlock()
	l.cond.Broadcast()
	return nil
}

// next waits for the Conn's next line.
func (l *lineReader) next(t *testing.T, n int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.lines) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no line %d from the Conn; so far: %q", n, l.lines)
		}
		t := time.AfterFunc(100*time.Millisecond, l.cond.Broadcast)
		l.cond.Wait()
		t.Stop()
	}
	return l.lines[n]
}

func newPipeConn(t *testing.T, o Options) *pipeConn {
	t.Helper()
	pr, pw := io.Pipe()
	out := &lineReader{}
	out.cond = sync.NewCond(&out.mu)
	if o.MaxLine == 0 {
		o.MaxLine = 1 << 10
		o.LimitName = "acp.maxLineBytes"
	}
	c := New(Lines(pr, o.MaxLine), out, o)
	p := &pipeConn{c: c, in: pw, out: out, err: make(chan error, 1)}
	go func() { p.err <- c.Run() }()
	t.Cleanup(func() {
		pw.Close()
		<-p.err
	})
	return p
}

func (p *pipeConn) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConnRefuses: each line that is no valid message gets its error, once,
// with the id it had when it had a usable one.
func TestConnRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", `{"jsonrpc":`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"`},
		{"not an object", `[1,2]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request","data":{"error":"a JSON-RPC message is a JSON object"}}}`},
		{"a bad id", `{"jsonrpc":"2.0","id":{},"method":"x"}`, `"error":{"code":-32600,"message":"Invalid request","data":{"error":"id must be a string, a number or null"}}`},
		{"a member twice", `{"jsonrpc":"2.0","id":7,"method":"x","method":"y"}`, `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"Invalid request","data":{"error":"the member \"method\" appears twice in the message"}}}`},
		{"an id twice", `{"jsonrpc":"2.0","id":7,"id":8,"method":"x"}`, `{"jsonrpc":"2.0","id":null,"error"`},
		{"not 2.0", `{"jsonrpc":"1.0","id":"a","method":"x"}`, `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"Invalid request","data":{"error":"jsonrpc must be \"2.0\""}}}`},
		{"no method", `{"jsonrpc":"2.0","id":3}`, `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"Invalid request","data":{"error":"a request needs a method, a response a result or an error"}}}`},
		{"an empty method", `{"jsonrpc":"2.0","id":3,"method":""}`, `"data":{"error":"method must be a non-empty string"}`},
		{"params twice", `{"jsonrpc":"2.0","id":3,"method":"x","params":{"a":1,"a":2}}`, `"data":{"error":"the member \"a\" appears twice in params"}`},
		{"a null id", `{"jsonrpc":"2.0","id":null,"method":"x"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request","data":{"error":"a request's id must be a string or a number: with a null id no answer could name its request","method":"x"}}}`},
		{"too long", `{"jsonrpc":"2.0","id":"big","method":"x","params":"` + strings.Repeat("a", 2000) + `"}`, `{"jsonrpc":"2.0","id":"big","error":{"code":-32600,"message":"Invalid request","data":{"error":"the line is 2053 bytes, longer than acp.maxLineBytes (1KiB); it was skipped"}}}`},
		{"no handler", `{"jsonrpc":"2.0","id":1e0,"method":"x"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found","data":{"method":"x"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeConn(t, Options{Max: 4})
			p.send(t, tc.in)
			if got := p.out.next(t, 0); !strings.Contains(got, tc.want) {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestConnAnswersOnce: a request is answered later, by id, once; its
// place is then free; a second answer is refused; ids are keyed exactly.
func TestConnAnswersOnce(t *testing.T) {
	reqs := make(chan *Request, 8)
	p := newPipeConn(t, Options{Max: 2, Handler: HandlerFunc(func(r *Request) { reqs <- r })})
	p.send(t, `{"jsonrpc":"2.0","id":9007199254740993,"method":"a","params":{"sessionId":"s1"}}`)
	r := <-reqs
	if r.Session != "s1" || r.ID != IDOfString(t, "9007199254740993") || r.ID == IDOfString(t, "9007199254740992") {
		t.Fatalf("the request: %+v", r)
	}
	if p.c.Pending() != 1 {
		t.Errorf("pending %d, want 1", p.c.Pending())
	}
	if !p.c.Respond(r.ID, map[string]int{"ok": 1}, nil) || p.c.Respond(r.ID, nil, nil) {
		t.Error("a request was not answered once")
	}
	if got := p.out.next(t, 0); got != `{"jsonrpc":"2.0","id":9007199254740993,"result":{"ok":1}}` {
		t.Errorf("the answer: %s", got)
	}
	if p.c.Pending() != 0 {
		t.Errorf("pending %d after the answer", p.c.Pending())
	}
}

func IDOfString(t *testing.T, raw string) ID {
	id, ok := IDOf([]byte(raw))
	if !ok {
		t.Fatalf("%s is no id", raw)
	}
	return id
}

// TestConnBackPressure: past Max requests unanswered the read loop reads
// nothing more (a cancel behind them waits too, in order) until one is
// answered.
func TestConnBackPressure(t *testing.T) {
	reqs := make(chan *Request, 8)
	var mu sync.Mutex
	var preempted []string
	p := newPipeConn(t, Options{Max: 1, Handler: HandlerFunc(func(r *Request) { reqs <- r }), Preempt: func(r *Request) bool {
		if r.Method != "cancel" {
			return false
		}
		mu.Lock()
		preempted = append(preempted, r.Method)
		mu.Unlock()
		return true
	}})
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"a"}`)
	first := <-reqs
	go func() {
		_, _ = io.WriteString(p.in, `{"jsonrpc":"2.0","id":2,"method":"b"}`+"\n")
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(p.in, `{"jsonrpc":"2.0","method":"cancel"}`+"\n")
	}()
	select {
	case r := <-reqs:
		t.Fatalf("a second request was served past the bound: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	mu.Lock()
	early := len(preempted)
	mu.Unlock()
	if early != 0 {
		t.Error("the cancel was read ahead of the request waiting for a place")
	}
	p.c.Respond(first.ID, "ok", nil)
	if r := <-reqs; r.Method != "b" {
		t.Fatalf("then: %+v", r)
	}
}

// TestConnCalls: a call waits for its answer, by id; an error answer is a
// *Error; a call given up tells the peer; the calls still waiting when the
// stream ends get ErrClosed.
func TestConnCalls(t *testing.T) {
	p := newPipeConn(t, Options{Max: 1, CallPrefix: "mm-"})
	ctx := context.Background()
	got := make(chan error, 1)
	var result json.RawMessage
	go func() {
		var err error
		result, err = p.c.Call(ctx, "ask", map[string]string{"q": "?"}, "s1")
		got <- err
	}()
	if line := p.out.next(t, 0); line != `{"jsonrpc":"2.0","id":"mm-1","method":"ask","params":{"q":"?"}}` {
		t.Fatalf("the call: %s", line)
	}
	p.send(t, `{"jsonrpc":"2.0","id":"mm-1","result":{"a":1}}`)
	if err := <-got; err != nil || string(result) != `{"a":1}` {
		t.Fatalf("the answer: %s %v", result, err)
	}
	go func() {
		_, err := p.c.Call(ctx, "ask", nil, "")
		got <- err
	}()
	p.out.next(t, 1)
	p.send(t, `{"jsonrpc":"2.0","id":"mm-2","error":{"code":-32000,"message":"no"}}`)
	if err := <-got; !ErrAuthRequired.Is(err) {
		t.Fatalf("an error answer: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := p.c.Call(cctx, "ask", nil, "")
		got <- err
	}()
	p.out.next(t, 2)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("a call given up: %v", err)
	}
	if line := p.out.next(t, 3); line != `{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"mm-3"}}` {
		t.Errorf("the peer was not told: %s", line)
	}
	go func() {
		_, err := p.c.Call(ctx, "ask", nil, "")
		got <- err
	}()
	p.out.next(t, 4)
	p.in.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Errorf("a call at the stream's end: %v", err)
	}
}

// TestClosedCallFindsConnDone: a call that got ErrClosed finds the Conn
// done (a caller that asks Done to say why its call failed, as the asked
// agents do, must not find it still open): Done is closed before the
// waiting calls are let go. Many calls wait at once, so that the first
// let go run while Close lets the others go.
func TestClosedCallFindsConnDone(t *testing.T) {
	const calls = 200
	for i := range 30 {
		p := newPipeConn(t, Options{Max: 1})
		got := make(chan bool, calls)
		for range calls {
			go func() {
				_, err := p.c.Call(context.Background(), "ask", nil, "")
				select {
				case <-p.c.Done():
					got <- errors.Is(err, ErrClosed)
				default:
					got <- false
				}
			}()
		}
		for n := range calls {
			p.out.next(t, n)
		}
		p.c.Close()
		for range calls {
			if !<-got {
				t.Fatalf("round %d: a call let go by Close did not find the Conn done", i)
			}
		}
		p.in.Close()
	}
}

// TestIDs: ids are equal when JSON-RPC takes them for the same, exactly.
func TestIDs(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"1", "1.0", true}, {"1", "1e0", true}, {"10", "1e1", true}, {`"1"`, "1", false},
		{"9007199254740993", "9007199254740992", false}, {"-0", "0", true}, {`"a"`, `"\u0061"`, true},
	} {
		a, b := IDOfString(t, tc.a), IDOfString(t, tc.b)
		if (a == b) != tc.same {
			t.Errorf("%s == %s: %v, want %v", tc.a, tc.b, a == b, tc.same)
		}
	}
	for _, bad := range []string{"null", "{}", "[]", "true"} {
		if _, ok := IDOf([]byte(bad)); ok {
			t.Errorf("%s is an id", bad)
		}
	}
}

// endedSource is a Source that says when its stream has ended without
// being read, as serve's inbox does.
type endedSource struct {
	msgs  chan Message
	ended chan struct{}
}

func (s *endedSource) Next() (Message, error) {
	m, ok := <-s.msgs
	if !ok {
		return Message{}, io.EOF
	}
	return m, nil
}

func (s *endedSource) Ended() <-chan struct{} { return s.ended }

// TestConnGivesUpAtTheEnd: a request waiting for a place in a full table
// stops waiting once its Source says the peer's stream has ended — the
// request holding the place may wait for an answer of the peer's that
// will never be read — and is answered with an error; the read loop then
// ends.
func TestConnGivesUpAtTheEnd(t *testing.T) {
	src := &endedSource{msgs: make(chan Message, 4), ended: make(chan struct{})}
	out := &lineReader{}
	out.cond = sync.NewCond(&out.mu)
	reqs := make(chan *Request, 4)
	c := New(src, out, Options{Max: 1, Handler: HandlerFunc(func(r *Request) { reqs <- r })})
	done := make(chan error, 1)
	go func() { done <- c.Run() }()
	src.msgs <- Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"a"}`))
	<-reqs
	src.msgs <- Parse([]byte(`{"jsonrpc":"2.0","id":2,"method":"b"}`))
	select {
	case r := <-reqs:
		t.Fatalf("a second request was served past the bound: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	close(src.ended)
	if line := out.next(t, 0); !strings.Contains(line, `"id":2`) || !strings.Contains(line, "the connection ended before this request could be served") {
		t.Errorf("the waiting request's answer: %s", line)
	}
	close(src.msgs)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the read loop did not end")
	}
	c.Close()
}
