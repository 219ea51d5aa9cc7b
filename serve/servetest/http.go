package servetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
)

// HTTP is a client connection over streamable HTTP, as the TypeScript
// SDK's createHttpStream makes it: the first message (initialize) is
// POSTed and answered inline with the connection's id; every later one is
// POSTed with Acp-Connection-Id, and with Acp-Session-Id when it belongs to
// a session (its params.sessionId, or the session whose stream carried the
// request it answers); the server's messages come on the connection's SSE
// stream, opened after initialize, and on each session's, opened when a
// response names a new session or before the first message of a session.
type HTTP struct {
	url, token string
	client     *http.Client
	ctx        context.Context
	cancel     context.CancelFunc

	in   chan []byte // the server's messages, from every stream; unbuffered, so that a client that stops reading stops taking them
	cur  []byte
	over chan struct{} // closed when the connection stream ends

	mu       sync.Mutex
	id       string
	sessions map[string]chan error // opened (or opening) session streams: nil once open
	answers  map[string]string     // requests received on a session stream: id → session
	wg       sync.WaitGroup
}

// DialHTTP returns a client for url (http:// or https://…/acp); nothing is
// sent before the first Write. client nil is http.DefaultClient.
func DialHTTP(url, token string, client *http.Client) *HTTP {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &HTTP{url: url, token: token, client: client, ctx: ctx, cancel: cancel,
		in: make(chan []byte), over: make(chan struct{}), sessions: map[string]chan error{}, answers: map[string]string{}}
}

// ConnectionID is the id the server gave the connection, "" before
// initialize.
func (c *HTTP) ConnectionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Write POSTs each line of p. A refused POST is an error naming its status
// and body.
func (c *HTTP) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		if err := c.send(line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *HTTP) send(msg []byte) error {
	if c.ConnectionID() == "" {
		return c.initialize(msg)
	}
	r := gjson.ParseBytes(msg)
	session := r.Get("params.sessionId").Str
	if session == "" && !r.Get("method").Exists() {
		c.mu.Lock()
		session = c.answers[r.Get("id").Raw]
		delete(c.answers, r.Get("id").Raw)
		c.mu.Unlock()
	}
	if session != "" {
		if err := c.openSession(session); err != nil {
			return err
		}
	}
	resp, err := c.post(msg, session)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
		return fmt.Errorf("POST: %s: %s", resp.Status, body)
	}
	return nil
}

func (c *HTTP) post(msg []byte, session string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.url, bytes.NewReader(msg))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.auth(req, session)
	return c.client.Do(req)
}

func (c *HTTP) auth(req *http.Request, session string) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if id := c.ConnectionID(); id != "" {
		req.Header.Set("Acp-Connection-Id", id)
	}
	if session != "" {
		req.Header.Set("Acp-Session-Id", session)
	}
}

func (c *HTTP) initialize(msg []byte) error {
	resp, err := c.post(msg, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	id := resp.Header.Get("Acp-Connection-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		return fmt.Errorf("initialize: %s: %s", resp.Status, body)
	}
	c.mu.Lock()
	c.id = id
	c.mu.Unlock()
	ready := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = c.stream("", ready)
		close(c.over) // the connection stream is the connection
	}()
	if err := <-ready; err != nil {
		return err
	}
	select {
	case c.in <- body:
	case <-c.ctx.Done():
	}
	return nil
}

// openSession opens a session's stream unless it is open, and waits until
// the server has answered its GET.
func (c *HTTP) openSession(session string) error {
	c.mu.Lock()
	ready, known := c.sessions[session]
	if !known {
		ready = make(chan error, 1)
		c.sessions[session] = ready
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			_ = c.stream(session, ready)
			c.mu.Lock()
			delete(c.sessions, session)
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	if ready == nil {
		return nil
	}
	err := <-ready
	c.mu.Lock()
	if c.sessions[session] == ready {
		c.sessions[session] = nil
	}
	c.mu.Unlock()
	ready <- err // for the next waiter
	return err
}

// stream reads one SSE stream until it ends; ready gets the GET's outcome.
func (c *HTTP) stream(session string, ready chan error) error {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.url, nil)
	if err != nil {
		ready <- err
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.auth(req, session)
	resp, err := c.client.Do(req)
	if err != nil {
		ready <- err
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
		err := fmt.Errorf("GET %q: %s: %s", session, resp.Status, body)
		ready <- err
		return err
	}
	ready <- nil
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var data []byte
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 && data != nil:
			c.received(data, session)
			data = nil
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
}

// received passes a message on to Read, opening the stream of a session
// a response names, and noting the session of a request.
func (c *HTTP) received(msg []byte, session string) {
	r := gjson.ParseBytes(msg)
	if s := r.Get("result.sessionId").Str; s != "" {
		c.wg.Add(1) // this stream's goroutine holds one: Close's Wait is not yet free
		go func() {
			defer c.wg.Done()
			_ = c.openSession(s)
		}()
	}
	if session != "" && r.Get("method").Exists() && r.Get("id").Exists() {
		c.mu.Lock()
		c.answers[r.Get("id").Raw] = session
		c.mu.Unlock()
	}
	select {
	case c.in <- msg:
	case <-c.ctx.Done():
	}
}

// Read gives the server's messages, one per line; io.EOF once the
// connection stream has ended, or Close was called (before initialize,
// no stream would ever end it).
func (c *HTTP) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		select {
		case msg := <-c.in:
			c.cur = append(msg, '\n')
		case <-c.over:
			select {
			case msg := <-c.in:
				c.cur = append(msg, '\n')
			default:
				return 0, io.EOF
			}
		case <-c.ctx.Done():
			return 0, io.EOF
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// Close ends the connection with DELETE and closes its streams.
func (c *HTTP) Close() error {
	var err error
	if id := c.ConnectionID(); id != "" {
		req, _ := http.NewRequest(http.MethodDelete, c.url, nil)
		c.auth(req, "")
		var resp *http.Response
		if resp, err = c.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				err = fmt.Errorf("DELETE: %s", resp.Status)
			}
		}
	}
	c.cancel()
	c.wg.Wait()
	return err
}

// IsEventStream says whether a response is an SSE stream.
func IsEventStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// PausingDialer dials TCP connections whose every read first waits for
// wait to return, each with a fixed receive buffer of 64 KiB: an HTTP
// client paused there stops taking what the server writes at its sockets.
// Paused above its transport instead, the client would still read a whole
// event off the socket before it handed it over, and a kernel may let a
// socket's buffer grow past a large answer: no write of the server's would
// ever stall.
func PausingDialer(wait func()) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(64 << 10)
		}
		return &pausedConn{Conn: c, wait: wait}, nil
	}
}

// pausedConn is a socket that reads nothing until wait returns.
type pausedConn struct {
	net.Conn
	wait func()
}

func (c *pausedConn) Read(p []byte) (int, error) {
	c.wait()
	return c.Conn.Read(p)
}
