package serve_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve"
)

// endless is a request body that sends n bytes, then nothing more until
// the test ends: a client that never finishes its message.
type endless struct {
	sent atomic.Int64
	n    int64
	stop chan struct{}
}

func (e *endless) Read(p []byte) (int, error) {
	if e.sent.Load() >= e.n {
		<-e.stop
		return 0, io.EOF
	}
	k := min(int64(len(p)), e.n-e.sent.Load())
	for i := range p[:k] {
		p[i] = ' '
	}
	e.sent.Add(k)
	return int(k), nil
}

// postEndless POSTs a body that sends n bytes and never ends, naming
// connection conn ("" for none), and returns the status.
func postEndless(t *testing.T, url string, n int64, conn string) int {
	t.Helper()
	body := &endless{n: n, stop: make(chan struct{})}
	defer close(body.stop)
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUnknownConnectionReadsNoBody: a POST naming a connection that does
// not exist is answered 404 before its body is read (issue 28: eight 60
// MiB bodies with a made-up id took 1.5 GiB).
func TestUnknownConnectionReadsNoBody(t *testing.T) {
	e := newEnv(t, nil)
	if status := postEndless(t, e.url, 1<<20, "made-up"); status != http.StatusNotFound {
		t.Fatalf("status %d, want 404", status)
	}
}

// TestMessageTimeLimit: a message that never ends is cut at
// serve.messageTimeout — over WebSocket the connection ends with 1008
// saying why (issue 28: one was read for ever, 9.7 GiB in 15 s), over HTTP
// the POST is answered 408.
func TestMessageTimeLimit(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MessageTimeout = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	w, err := ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	// More than the writer buffers: the first frames go, the message
	// stays open.
	if _, err := w.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"` + strings.Repeat("a", 256<<10))); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = ws.Read(ctx)
	if status := websocket.CloseStatus(err); status != websocket.StatusPolicyViolation {
		t.Fatalf("the socket ended with %v (%d), want 1008", err, status)
	}
	t.Logf("cut after %v", time.Since(start).Round(time.Millisecond))

	if status := postEndless(t, e.url, 1<<10, ""); status != http.StatusRequestTimeout {
		t.Errorf("a POST whose body never ends: %d, want 408", status)
	}
}

// TestIncomingRoom: the server holds at most serve.maxIncomingBytes of
// client messages being read: with the room taken by two messages still
// coming, a third client's message waits, and is served once one of them
// is whole.
func TestIncomingRoom(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) {
		o.MaxMessageBytes = 64 << 10
		o.MaxIncomingBytes = 128 << 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	dial := func() *websocket.Conn {
		ws, _, err := websocket.Dial(ctx, e.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		return ws
	}
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"_meta":{"pad":"`
	// Two messages begun, not ended: each holds its room.
	var open []*websocket.Conn
	var writers []io.WriteCloser
	for range 2 {
		ws := dial()
		w, err := ws.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(init + strings.Repeat("a", 40<<10))); err != nil {
			t.Fatal(err)
		}
		open, writers = append(open, ws), append(writers, w)
	}
	// Both are being read, holding the room: /metrics says so.
	waitFor(t, func() bool { return incomingBytes(t, e) == 128<<10 })
	third := dial()
	answered := make(chan time.Time, 1)
	go func() {
		if err := third.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`)); err != nil {
			return
		}
		if _, _, err := third.Read(ctx); err == nil {
			answered <- time.Now()
		}
	}()
	// A second is no bound on its wait: it waits for as long as the room
	// is full, whatever the machine's speed.
	select {
	case <-answered:
		t.Fatal("a message was read while the room was full")
	case <-time.After(time.Second):
	}
	ended := time.Now()
	if _, err := writers[0].Write([]byte(`"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := writers[0].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-answered:
		t.Logf("the third message was answered %v after the first was whole", at.Sub(ended).Round(time.Millisecond))
	case <-time.After(testwait.Hang):
		t.Fatal("the third message was never read")
	}
	if _, _, err := open[0].Read(ctx); err != nil {
		t.Errorf("the first client, once its message was whole: %v", err)
	}
}

// incomingBytes reads mm_incoming_bytes on the server's /metrics.
func incomingBytes(t *testing.T, e *env) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(e.url, "/acp")+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "mm_incoming_bytes "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n)
		}
	}
	t.Fatal("no mm_incoming_bytes on /metrics")
	return 0
}
