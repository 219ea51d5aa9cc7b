//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/internal/testwait"
)

// rawWS is a WebSocket client of a served mm that writes its frames from
// readers (a 15 MiB message costs the test no 15 MiB) and counts the
// answers it reads.
type rawWS struct {
	ws      *websocket.Conn
	mu      sync.Mutex
	answers map[string]string // id → the line answering it
	cond    *sync.Cond
	closed  error
}

func dialRawWS(t *testing.T, ctx context.Context, s *served) *rawWS {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, s.ws, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + serveToken}}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(-1)
	c := &rawWS{ws: ws, answers: map[string]string{}}
	c.cond = sync.NewCond(&c.mu)
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			c.mu.Lock()
			if err != nil {
				c.closed = err
				c.cond.Broadcast()
				c.mu.Unlock()
				return
			}
			r := gjson.GetManyBytes(b, "method", "id")
			if !r[0].Exists() && r[1].Exists() {
				c.answers[r[1].Raw] = string(b)
				c.cond.Broadcast()
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow() })
	return c
}

// send writes one message as the frame of parts, read in turn.
func (c *rawWS) send(ctx context.Context, parts ...io.Reader) error {
	w, err := c.ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, io.MultiReader(parts...)); err != nil {
		return err
	}
	return w.Close()
}

// wait waits for the answer to id (raw JSON).
func (c *rawWS) wait(ctx context.Context, id string) (string, error) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if a, ok := c.answers[id]; ok {
			return a, nil
		}
		if c.closed != nil {
			return "", c.closed
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		c.cond.Wait()
	}
}

// call sends a small request and waits for its answer.
func (c *rawWS) call(ctx context.Context, id int, method, params string) (string, error) {
	if err := c.send(ctx, strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))); err != nil {
		return "", err
	}
	return c.wait(ctx, fmt.Sprint(id))
}

// rawHTTP is a streamable HTTP client of a served mm that posts its
// messages from readers and reads its streams' answers.
type rawHTTP struct {
	url, id string
	answers chan string
	cancel  context.CancelFunc
}

func dialRawHTTP(t *testing.T, ctx context.Context, s *served) *rawHTTP {
	t.Helper()
	resp, err := rawPost(ctx, s.url, "", "", strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`), -1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %s", resp.Status)
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &rawHTTP{url: s.url, id: resp.Header.Get("Acp-Connection-Id"), answers: make(chan string, 1024), cancel: cancel}
	t.Cleanup(cancel)
	c.stream(t, sctx, "")
	return c
}

func rawPost(ctx context.Context, url, conn, session string, body io.Reader, n int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+serveToken)
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	return http.DefaultClient.Do(req)
}

// stream opens a stream (the connection's, or a session's) and passes
// its answers on.
func (c *rawHTTP) stream(t *testing.T, ctx context.Context, session string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+serveToken)
	req.Header.Set("Acp-Connection-Id", c.id)
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}
	go func() {
		defer resp.Body.Close()
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				d = bytes.TrimSpace(d)
				if g := gjson.GetManyBytes(d, "method", "id"); !g[0].Exists() && g[1].Exists() {
					select {
					case c.answers <- string(d):
					default:
					}
				}
			}
		}
	}()
}

// sendSized posts one message of n bytes from body.
func (c *rawHTTP) sendSized(ctx context.Context, session string, body io.Reader, n int64) (int, error) {
	resp, err := rawPost(ctx, c.url, c.id, session, body, n)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestServeMemoryOfMessages: many large messages at once, over both
// transports from several connections, hold at most
// serve.maxIncomingBytes and the stated overhead of mm serve's memory
// (docs/bounds.md).
func TestServeMemoryOfMessages(t *testing.T) {
	kind := os.Getenv("MM_MEM_KIND")
	if kind == "" {
		kind = "prompt"
	}
	bin := mmBin
	if b := os.Getenv("MM_MEM_BIN"); b != "" {
		bin = b
	}
	s := startServeBin(t, bin, t.TempDir(), "config.yaml", "", "MM_SERVE_TOKEN="+serveToken, "GODEBUG="+os.Getenv("MM_MEM_GODEBUG"))
	defer func() { t.Log(s.stderr.String()) }()
	ctx := testwait.Context(t)
	pid := s.cmd.Process.Pid
	w := watchRSS(pid, 8<<30)
	defer w.stop()
	const size = 15 << 20
	const wsConns, httpConns, each = 4, 4, 8
	text := bytes.Repeat([]byte("a"), size-200)
	if kind == "blocks" {
		text = []byte(`x"}` + strings.Repeat(`,{"type":"text","text":""}`, (size-200)/26) + `,{"type":"text","text":"`)
	}
	msg := func(id int, sid string) (io.Reader, int64) {
		var head string
		switch kind {
		case "junk":
			head = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"no/such","params":{"sessionId":%q,"x":"`, id, sid)
		case "image":
			head = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"image","mimeType":"image/png","data":"`, id, sid)
		case "new":
			head = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":"/nonexistent","mcpServers":[{"name":"x","command":"/bin/true","args":[],"env":[{"name":"a","value":"`, id)
		default:
			head = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"`, id, sid)
		}
		tail := `"}]}}`
		if kind == "junk" {
			tail = `"}}`
		}
		if kind == "new" {
			tail = `"}]}]}}`
		}
		return io.MultiReader(strings.NewReader(head), bytes.NewReader(text), strings.NewReader(tail)), int64(len(head) + len(text) + len(tail))
	}
	newSession := `{"cwd":%q,"mcpServers":[]}`
	base := procStatus(pid, "VmRSS:")
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range wsConns {
		c := dialRawWS(t, ctx, s)
		if _, err := c.call(ctx, 0, "initialize", `{"protocolVersion":1}`); err != nil {
			t.Fatal(err)
		}
		a, err := c.call(ctx, 1, "session/new", fmt.Sprintf(newSession, s.project(t)))
		if err != nil {
			t.Fatal(err)
		}
		sid := gjson.Get(a, "result.sessionId").Str
		if kind == "busy" {
			_ = c.send(ctx, strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"slow"}]}}`, sid)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				r, _ := msg(100+j, sid)
				if err := c.send(ctx, r); err != nil {
					errs <- fmt.Errorf("ws %d: %v", i, err)
					return
				}
			}
			for j := range each {
				if kind == "busy" {
					break
				}
				if _, err := c.wait(ctx, fmt.Sprint(100+j)); err != nil {
					errs <- fmt.Errorf("ws %d: answer %d: %v", i, j, err)
					return
				}
			}
		}()
	}
	for i := range httpConns {
		c := dialRawHTTP(t, ctx, s)
		resp, err := rawPost(ctx, s.url, c.id, "", strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":`+newSession+`}`, s.project(t))), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		a := <-c.answers
		sid := gjson.Get(a, "result.sessionId").Str
		c.stream(t, context.Background(), sid)
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, n := msg(100+j, sid)
				st, err := c.sendSized(ctx, sid, r, n)
				if err != nil || st != http.StatusAccepted {
					errs <- fmt.Errorf("http %d: %d %v", i, st, err)
				}
			}()
		}
	}
	start := time.Now()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Log(err)
	}
	time.Sleep(3 * time.Second)
	t.Logf("kind %s: %d messages of %d MiB in %v: mm serve's RSS %d MiB before, peak %d MiB (VmHWM %d MiB), now %d MiB",
		kind, (wsConns+httpConns)*each, size>>20, time.Since(start).Round(time.Millisecond), base>>20, w.peak()>>20, procStatus(pid, "VmHWM:")>>20, w.rss()>>20)
}
