package acptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/jsonrpc"
)

// The client's connection: one jsonrpc.Conn, whose read loop hands what mm
// sends to the Client as acp-go-sdk's client would (its types decode and
// validate each), and whose calls are the SDK's ClientSideConnection's
// methods, with the SDK's types and errors. The read loop hands each
// session/update to the Client before it reads on, so a call returns once
// its response and every update written before it have reached the Client.

// sdkMaxLine is the longest line acp-go-sdk's reader takes, newline
// included; a longer one ends its connection.
const sdkMaxLine = 10 << 20

// maxInFlight bounds mm's requests the Client is answering at once: the
// SDK's client has no bound (a goroutine for each), and a test may hold
// many permission requests open.
const maxInFlight = 1 << 16

// Dial is a client over any byte stream to an agent: w takes the client's
// lines, r gives the agent's (a WebSocket or streamable-HTTP adapter of
// serve/servetest, or pipes).
func Dial(client *Client, w io.Writer, r io.Reader) *Conn {
	c := &Conn{Client: client}
	c.rpc = jsonrpc.New(&source{r: bufio.NewReaderSize(r, 64<<10), c: c}, jsonrpc.NewLineWriter(w), jsonrpc.Options{
		Handler: jsonrpc.HandlerFunc(c.serve), Max: maxInFlight,
	})
	go func() { _ = c.rpc.Run() }()
	return c
}

// source is the agent's output as acp-go-sdk's reader reads it, and not
// as mm's own reader does (jsonrpc.Lines): each line decoded by
// encoding/json into the message's members, as the SDK decodes it, so that
// a line mm's reader would take and the SDK's would not fails the test,
// and the parses a test counts (jsonrpc.Parses) are mm's alone. A line
// that is not a JSON object is dropped (the SDK logs it); a line over
// sdkMaxLine ends the connection.
type source struct {
	r *bufio.Reader
	c *Conn
}

func (s *source) Next() (jsonrpc.Message, error) {
	for {
		line, _, size, err := jsonrpc.ReadLine(s.r, sdkMaxLine-1)
		if size >= sdkMaxLine {
			// Set before the read loop ends, and read once it has (Done).
			s.c.failed = fmt.Errorf("acptest: the agent wrote a line of %d bytes, over the %d acp-go-sdk reads", size, sdkMaxLine)
			return jsonrpc.Message{}, s.c.failed
		}
		if body := bytes.TrimSpace(line); len(body) > 0 {
			m := jsonrpc.Message{Line: body}
			if json.Unmarshal(body, &m) == nil && body[0] == '{' {
				return m, err
			}
		}
		if err != nil {
			return jsonrpc.Message{}, err
		}
	}
}

// serve hands what the agent sends to the Client, on the read loop; a
// request is answered from a goroutine of its own, as a test's answer may
// wait.
func (c *Conn) serve(r *jsonrpc.Request) {
	switch r.Method {
	case acp.ClientMethodSessionUpdate:
		if p, ok := decode[acp.SessionNotification](c, r); ok && !r.IsCall() {
			_ = c.Client.SessionUpdate(context.Background(), p)
		}
	case acp.ClientMethodSessionRequestPermission:
		if p, ok := decode[acp.RequestPermissionRequest](c, r); ok && r.IsCall() {
			answer(c, r.ID, func() (any, error) { return c.Client.RequestPermission(context.Background(), p) })
		}
	case acp.ClientMethodElicitationCreate:
		if p, ok := decode[acp.UnstableCreateElicitationRequest](c, r); ok && r.IsCall() {
			answer(c, r.ID, func() (any, error) { return c.Client.UnstableCreateElicitation(context.Background(), p) })
		}
	case acpmethod.CancelRequest:
		// The Client answers anyway: it is counted (Client.Cancels).
		if !r.IsCall() {
			c.Client.mu.Lock()
			c.Client.cancels++
			c.Client.mu.Unlock()
			c.Client.cond.Broadcast()
		}
	default:
		// The rest (the file system, terminals, extensions) is not
		// offered; the agent's other notifications are dropped.
		if r.IsCall() {
			c.rpc.Respond(r.ID, nil, jsonrpc.ErrMethodNotFound.Data(map[string]any{"method": r.Method}))
		}
	}
}

// decode reads r's params as a P as the SDK's client does, decoded then
// validated; a P it refuses is answered as the SDK answers it, and noted
// (Client.Refused).
func decode[P any, PP interface {
	*P
	Validate() error
}](c *Conn, r *jsonrpc.Request) (P, bool) {
	var p P
	err := json.Unmarshal(r.Params, &p)
	if err == nil {
		err = PP(&p).Validate()
	}
	if err != nil {
		c.Client.refuse(fmt.Errorf("acptest: acp-go-sdk's types refuse the agent's %s: %v", r.Method, err))
		if r.IsCall() {
			c.rpc.Respond(r.ID, nil, jsonrpc.ErrInvalidParams.With(err.Error()))
		}
		return p, false
	}
	return p, true
}

// answer answers the request id with what ask returns, from a goroutine.
func answer(c *Conn, id jsonrpc.ID, ask func() (any, error)) {
	go func() {
		res, err := ask()
		if err != nil {
			c.rpc.Respond(id, nil, sdkError(err))
			return
		}
		c.rpc.Respond(id, res, nil)
	}()
}

// sdkError is err as acp-go-sdk answers with it: a wire error as it is, a
// cancel as "Request cancelled", anything else as "Internal error", saying
// why in data.
func sdkError(err error) *jsonrpc.Error {
	var e *jsonrpc.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return jsonrpc.ErrCancelled.With(err.Error())
	}
	return jsonrpc.ErrInternal.With(err.Error())
}

// refuse notes the first message the SDK's types refused.
func (c *Client) refuse(err error) {
	c.mu.Lock()
	if c.refused == nil {
		c.refused = err
	}
	c.mu.Unlock()
}

// Refused is the first notification or request of the agent's that
// acp-go-sdk's types refused (the SDK's client would have dropped it, or
// answered it with an error), or nil: every call after it fails with it.
func (c *Client) Refused() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// call calls method with params and reads its result as the SDK's client
// does; its errors are the SDK's (sdkCallError). It fails, too, once the
// Client has been sent something the SDK's types refuse.
func call[R any](ctx context.Context, c *Conn, method string, params any) (R, error) {
	r, err := jsonrpc.CallFor[R](ctx, c.rpc, method, params, "")
	if err != nil {
		return r, c.sdkCallError(ctx, err)
	}
	return r, c.Client.Refused()
}

// notify sends a notification, as the SDK's client does.
func (c *Conn) notify(ctx context.Context, method string, params any) error {
	if err := ctx.Err(); err != nil {
		return jsonrpc.ErrInternal.With(err.Error())
	}
	if err := c.rpc.Notify(method, params, ""); err != nil {
		return jsonrpc.ErrInternal.With(err.Error())
	}
	return c.Client.Refused()
}

// sdkCallError is a call's error as acp-go-sdk's client reports it: the
// agent's error as it is; the connection's end as "peer disconnected
// before response" (and why it ended, when the reader stopped it); a
// context that ended as its cause.
func (c *Conn) sdkCallError(ctx context.Context, err error) error {
	var e *jsonrpc.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, jsonrpc.ErrClosed) || ctx.Err() != nil && c.closed():
		why := "peer disconnected before response"
		if c.failed != nil {
			why += ": " + c.failed.Error()
		}
		return jsonrpc.ErrInternal.With(why)
	case ctx.Err() != nil:
		return sdkError(context.Cause(ctx))
	}
	return jsonrpc.ErrInternal.With(err.Error())
}

// closed says whether the connection has ended.
func (c *Conn) closed() bool {
	select {
	case <-c.rpc.Done():
		return true
	default:
		return false
	}
}

// Done is closed once the connection has ended: the agent's output ended,
// or the reader stopped it.
func (c *Conn) Done() <-chan struct{} { return c.rpc.Done() }

// The methods of acp-go-sdk's ClientSideConnection, with its types.

// Authenticate is authenticate.
func (c *Conn) Authenticate(ctx context.Context, p acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return call[acp.AuthenticateResponse](ctx, c, acp.AgentMethodAuthenticate, p)
}

// Initialize is initialize.
func (c *Conn) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	return call[acp.InitializeResponse](ctx, c, acp.AgentMethodInitialize, p)
}

// Logout is logout.
func (c *Conn) Logout(ctx context.Context, p acp.LogoutRequest) (acp.LogoutResponse, error) {
	return call[acp.LogoutResponse](ctx, c, acp.AgentMethodLogout, p)
}

// NewSession is session/new.
func (c *Conn) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	return call[acp.NewSessionResponse](ctx, c, acp.AgentMethodSessionNew, p)
}

// LoadSession is session/load; it returns once its response and the
// replay written before it have arrived.
func (c *Conn) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	return call[acp.LoadSessionResponse](ctx, c, acp.AgentMethodSessionLoad, p)
}

// ResumeSession is session/resume.
func (c *Conn) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return call[acp.ResumeSessionResponse](ctx, c, acp.AgentMethodSessionResume, p)
}

// ListSessions is session/list.
func (c *Conn) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return call[acp.ListSessionsResponse](ctx, c, acp.AgentMethodSessionList, p)
}

// CloseSession is session/close.
func (c *Conn) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return call[acp.CloseSessionResponse](ctx, c, acp.AgentMethodSessionClose, p)
}

// UnstableDeleteSession is session/delete.
func (c *Conn) UnstableDeleteSession(ctx context.Context, p acp.UnstableDeleteSessionRequest) (acp.UnstableDeleteSessionResponse, error) {
	return call[acp.UnstableDeleteSessionResponse](ctx, c, acp.AgentMethodSessionDelete, p)
}

// UnstableForkSession is session/fork.
func (c *Conn) UnstableForkSession(ctx context.Context, p acp.UnstableForkSessionRequest) (acp.UnstableForkSessionResponse, error) {
	return call[acp.UnstableForkSessionResponse](ctx, c, acp.AgentMethodSessionFork, p)
}

// SetSessionMode is session/set_mode.
func (c *Conn) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return call[acp.SetSessionModeResponse](ctx, c, acp.AgentMethodSessionSetMode, p)
}

// SetSessionConfigOption is session/set_config_option.
func (c *Conn) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return call[acp.SetSessionConfigOptionResponse](ctx, c, acp.AgentMethodSessionSetConfigOption, p)
}

// Prompt is session/prompt; it returns once its response and every update
// written before it have arrived. When ctx ends first, the agent is told
// with $/cancel_request and session/cancel, as by the SDK.
func (c *Conn) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	r, err := call[acp.PromptResponse](ctx, c, acp.AgentMethodSessionPrompt, p)
	if err != nil && ctx.Err() != nil {
		_ = c.Cancel(context.Background(), acp.CancelNotification{SessionId: p.SessionId})
	}
	return r, err
}

// PromptCancelRequest is session/prompt whose end of ctx tells the agent
// with $/cancel_request alone, which cancels this prompt only (the SDK
// also sends session/cancel, which cancels every prompt of the session).
func (c *Conn) PromptCancelRequest(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	return call[acp.PromptResponse](ctx, c, acp.AgentMethodSessionPrompt, p)
}

// Cancel is session/cancel.
func (c *Conn) Cancel(ctx context.Context, p acp.CancelNotification) error {
	return c.notify(ctx, acp.AgentMethodSessionCancel, p)
}

// CallExtension calls an extension method (its name starts with "_") and
// returns its result as it is.
func (c *Conn) CallExtension(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if len(method) == 0 || method[0] != '_' {
		return nil, fmt.Errorf("extension method name must start with '_' (got %q)", method)
	}
	return call[json.RawMessage](ctx, c, method, params)
}

// NotifyExtension sends an extension notification (its name starts with
// "_").
func (c *Conn) NotifyExtension(ctx context.Context, method string, params any) error {
	if len(method) == 0 || method[0] != '_' {
		return fmt.Errorf("extension method name must start with '_' (got %q)", method)
	}
	return c.notify(ctx, method, params)
}

// Send writes a request of session sid now, in order with what the
// connection writes next, and returns the wait for its answer: requests
// sent so reach mm in the order sent, not waiting for each other.
func (c *Conn) Send(method string, params any, sid acp.SessionId) (wait func(ctx context.Context) (json.RawMessage, error), err error) {
	_, w, err := c.rpc.Go(method, params, string(sid))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (json.RawMessage, error) {
		r, err := w(ctx)
		if err != nil {
			return nil, err
		}
		if r.Error != nil {
			return nil, r.Error
		}
		return r.Result, nil
	}, nil
}
