package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/internal/testwait"
)

// raw speaks streamable HTTP by hand, to see statuses and streams as they
// are.
type raw struct {
	t     *testing.T
	url   string
	token string
	id    string // Acp-Connection-Id once initialized
}

func (e *env) raw() *raw { return &raw{t: e.t, url: e.url, token: token} }

// do sends one request; headers are name, value pairs.
func (r *raw) do(method, body string, headers ...string) (*http.Response, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.id != "" {
		req.Header.Set("Acp-Connection-Id", r.id)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// post sends a message and wants status.
func (r *raw) post(body string, status int, headers ...string) string {
	r.t.Helper()
	resp, b := r.do(http.MethodPost, body, headers...)
	if resp.StatusCode != status {
		r.t.Fatalf("POST %s: %d %q, want %d", body, resp.StatusCode, b, status)
	}
	return b
}

const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`

// init opens the connection.
func (r *raw) init() {
	r.t.Helper()
	resp, b := r.do(http.MethodPost, initialize)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Acp-Connection-Id") == "" || gjson.Get(b, "result.protocolVersion").Int() != 1 {
		r.t.Fatalf("initialize: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	r.id = resp.Header.Get("Acp-Connection-Id")
}

// sse is one open SSE stream.
type sse struct {
	msgs   chan string
	cancel context.CancelFunc
	done   chan struct{}
}

// stream opens a stream (the connection's, or session's) and wants status.
func (r *raw) stream(session string, status int) *sse {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Acp-Connection-Id", r.id)
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		r.t.Fatal(err)
	}
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		r.t.Fatalf("GET stream %q: %d %q, want %d", session, resp.StatusCode, b, status)
	}
	s := &sse{msgs: make(chan string, 1024), cancel: cancel, done: make(chan struct{})}
	if status != http.StatusOK {
		resp.Body.Close()
		cancel()
		close(s.done)
		close(s.msgs)
		return s
	}
	go func() {
		defer close(s.done)
		defer close(s.msgs)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				s.msgs <- string(d)
			}
		}
	}()
	r.t.Cleanup(s.close)
	return s
}

func (s *sse) close() {
	s.cancel()
	<-s.done
}

// next waits for the stream's next message whose path matches, skipping
// others; "" if the stream ends, and a failure after testwait.Hang.
func (s *sse) next(t *testing.T, path, want string) string {
	t.Helper()
	timeout := time.After(testwait.Hang)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return ""
			}
			if gjson.Get(m, path).String() == want {
				return m
			}
		case <-timeout:
			t.Fatalf("no message with %s = %q", path, want)
		}
	}
}

// ended says whether the stream ends, testwait.Hang at most.
func (s *sse) ended() bool {
	timeout := time.After(testwait.Hang)
	for {
		select {
		case _, ok := <-s.msgs:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
