package acptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/coder/acp-go-sdk"
)

// The SDK's client hands each notification to a goroutine of its own while
// it answers requests on others, so a prompt's response can reach the caller
// before the updates written ahead of it have reached the Client. A test that
// asserts "the turn's updates" after the response would then race the SDK.
//
// The cure is at the level of the stream: a tally counts the session/update
// notifications as their lines pass on the way in, and the Client counts
// those it was handed. When a response arrives, every line written before it
// has already passed the tally (the SDK reads the stream in order), so once
// the Client has been handed as many notifications as the tally had counted,
// it holds every update written before that response.

// updatePrefix is how mm (and the SDK's encoder) begins a session/update
// notification: the envelope's fields in that order, no id.
var updatePrefix = []byte(`{"jsonrpc":"2.0","method":"session/update"`)

// tally counts the session/update lines of a stream written through it.
type tally struct {
	c *Client
	// head is the start of the line being read (enough to recognise it);
	// inLine says whether a line has begun since the last newline.
	head   []byte
	inLine bool
	// line is the whole line once it is known to be a session/update:
	// only one that is valid JSON counts, since the SDK drops a line it
	// cannot decode (a frame a lost connection cut off, which mm connect
	// ends with a newline) and never hands it over.
	line []byte
}

// Write is called with the bytes the SDK reads, in order, by one goroutine.
func (t *tally) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := len(updatePrefix) - len(t.head); room > 0 {
			take := min(room, len(chunk))
			t.head = append(t.head, chunk[:take]...)
		}
		if len(chunk) > 0 {
			t.inLine = true
		}
		if len(t.head) < len(updatePrefix) || bytes.Equal(bytes.TrimLeft(t.head, " \t\r"), updatePrefix) {
			t.line = append(t.line, chunk...) // only an update's line is kept
		}
		if i < 0 {
			break
		}
		if t.inLine && bytes.Equal(bytes.TrimLeft(t.head, " \t\r"), updatePrefix) && json.Valid(t.line) {
			t.c.sawUpdate()
		}
		t.head, t.inLine, t.line = t.head[:0], false, t.line[:0]
		p = p[i+1:]
	}
	return n, nil
}

// settleBound bounds the wait for updates the SDK has read but not yet handed
// over: far above any normal delay, so that only a lost notification (one the
// SDK could not decode) ends it.
const settleBound = 2 * time.Minute

// Settle waits until the Client has been handed every session/update read
// from the stream so far: called after a response, it makes the updates
// written before that response visible to Updates. It returns an error if
// ctx ends first or the SDK never hands some of them over.
func (c *Client) Settle(ctx context.Context) error {
	c.mu.Lock()
	want := c.seen
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, settleBound)
	defer cancel()
	defer c.wakeWhenDone(ctx)()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.delivered < want {
		if ctx.Err() != nil {
			return fmt.Errorf("acptest: %d of the %d session/update notifications read were handed to the client: %w", c.delivered, want, ctx.Err())
		}
		c.cond.Wait()
	}
	return nil
}

// Dial is a client over any byte stream to an agent (a WebSocket or
// streamable-HTTP adapter of serve/servetest): a ClientSideConnection whose
// Prompt and the other session requests wait for the updates written before
// their response, as over pipes.
func Dial(client *Client, w io.Writer, r io.Reader) *Conn {
	conn := acp.NewClientSideConnection(client, w, io.TeeReader(r, &tally{c: client}))
	conn.SetLogger(slog.New(slog.DiscardHandler))
	return &Conn{ClientSideConnection: conn, Client: client}
}

func (c *Client) sawUpdate() {
	c.mu.Lock()
	c.seen++
	c.mu.Unlock()
}

// Prompt sends session/prompt and returns once its response and every
// update written before it have arrived.
func (c *Conn) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.Prompt)
}

// LoadSession sends session/load and returns once its response and the
// replay written before it have arrived.
func (c *Conn) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.LoadSession)
}

// ResumeSession is session/resume, settled as Prompt is.
func (c *Conn) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.ResumeSession)
}

// UnstableForkSession is session/fork, settled as Prompt is.
func (c *Conn) UnstableForkSession(ctx context.Context, p acp.UnstableForkSessionRequest) (acp.UnstableForkSessionResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.UnstableForkSession)
}

// SetSessionMode is session/set_mode, settled as Prompt is.
func (c *Conn) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.SetSessionMode)
}

// SetSessionConfigOption is session/set_config_option, settled as Prompt is.
func (c *Conn) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.SetSessionConfigOption)
}

// CloseSession is session/close, settled as Prompt is.
func (c *Conn) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return settled(ctx, c, p, c.ClientSideConnection.CloseSession)
}

// settled sends a request and waits, once it is answered, for the updates
// written before its response.
func settled[P, R any](ctx context.Context, c *Conn, p P, send func(context.Context, P) (R, error)) (R, error) {
	resp, err := send(ctx, p)
	if serr := c.Client.Settle(context.WithoutCancel(ctx)); serr != nil && err == nil {
		err = serr
	}
	return resp, err
}
