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

	"github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
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
// client messages, and a message holds its room — its buffer, and what
// decoding it may allocate (jsonrpc.DecodeBytes) — until mm has served it
// or handed it on, not merely taken it (issue 42: the room was given back
// once mm took a message, and 64 messages of 15 MiB took mm to 1 GiB).
// Here mm's reader waits with a message of 400 KiB (acp.maxPending
// requests unanswered: a turn that never ends): it holds its room, and
// another client's message of 200 KiB waits for room, for as long as the
// room is held; once the first client leaves, its message gives its room
// back and the second is served.
func TestIncomingRoom(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, func(o *serve.Options, c *configs.Config) {
				o.MaxMessageBytes = 1000 << 10
				o.MaxIncomingBytes = 2000 << 10
				c.ACP.MaxPending = 1
			})
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
			defer cancel()
			c := e.dial(transport, token)
			sid := c.start(t, ctx)
			go func() { _, _ = c.ask(ctx, sid, "slow") }() // never answered: the one request pending
			if err := c.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
				t.Fatal(err)
			}
			listed := make(chan error, 1)
			go func() {
				_, err := c.ListSessions(ctx, acp.ListSessionsRequest{Meta: map[string]any{"pad": strings.Repeat("a", 400<<10)}})
				listed <- err
			}()
			// Taken by mm's reader, which waits: the room stays held.
			waitFor(t, func() bool { return incomingBytes(t, e) >= int(jsonrpc.DecodeBytes(400<<10, 0))+400<<10 })
			t.Logf("mm holds a message of 400 KiB; the room holds %d", incomingBytes(t, e))

			ws, _, err := websocket.Dial(ctx, e.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			answered := make(chan time.Time, 1)
			go func() {
				msg := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"_meta":{"pad":"` + strings.Repeat("b", 200<<10) + `"}}}`
				if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					return
				}
				if _, _, err := ws.Read(ctx); err == nil {
					answered <- time.Now()
				}
			}()
			// A second is no bound on its wait: it waits for as long as
			// the room is held, whatever the machine's speed.
			select {
			case <-answered:
				t.Fatal("a message was read while the room was held")
			case <-time.After(time.Second):
			}
			left := time.Now()
			_ = c.stream.Close()
			select {
			case at := <-answered:
				t.Logf("the second message was answered %v after the first client left", at.Sub(left).Round(time.Millisecond))
			case <-time.After(testwait.Hang):
				t.Fatal("the second message was never read")
			}
			<-listed
			_ = ws.CloseNow()
			waitFor(t, func() bool { return incomingBytes(t, e) == 0 })
		})
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
