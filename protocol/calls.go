package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/tools"
)

// mm's own requests to the client. acp-go-sdk v0.13.5 has elicitation only
// as unstable types, and its UnstableCreateElicitationForm cannot carry the
// request's top-level sessionId and toolCallId that ACP's schema (and the
// seed) give a form; so elicitation/create is sent here, as a raw call: the
// request goes out through the session's ordered writer (after the
// tool_call it belongs to), and the ingress hands its response back here
// instead of to the SDK. Ids are strings ("mm-1", …), which never collide
// with the SDK's numeric ones.

// call asks the client (a permission, a form) and waits for its answer.
func (a *Agent) call(ctx context.Context, sessionID, method string, params any) (json.RawMessage, error) {
	return a.ask(sessionID, method, params)(ctx)
}

// ask queues a request of mm's for the client behind everything queued
// for its session (the connection's table of mm's calls waits for its
// answer), and returns the wait for the answer: ended by ctx, it gives the
// request up and tells the client so ($/cancel_request).
func (a *Agent) ask(sessionID, method string, params any) (wait func(context.Context) (json.RawMessage, error)) {
	return a.askNoted(sessionID, method, params, nil)
}

// askNoted is ask for a call that keeps note in the connection's table of
// its calls (jsonrpc.Conn.ExpectNoted), by which it may be given up
// (Sink.Abandon); with a nil note, an ordinary call.
func (a *Agent) askNoted(sessionID, method string, params, note any) (wait func(context.Context) (json.RawMessage, error)) {
	var id jsonrpc.ID
	var await func(context.Context) (jsonrpc.Response, error)
	if note != nil {
		id, await = a.rpc.ExpectNoted(sessionID, note)
	} else {
		id, await = a.rpc.Expect(sessionID)
	}
	a.box.Request(sessionID, id, method, params)
	return func(ctx context.Context) (json.RawMessage, error) {
		r, err := await(ctx)
		switch {
		case errors.Is(err, jsonrpc.ErrClosed):
			return nil, errConnClosed
		case err != nil:
			a.box.Request(sessionID, jsonrpc.ID{}, acpmethod.CancelRequest, map[string]any{"requestId": id})
			return nil, err
		case r.Error != nil:
			return nil, r.Error
		}
		return r.Result, nil
	}
}

var errConnClosed = errors.New("the connection is closed")

type client struct {
	call  CallFunc
	forms func() bool
	caps  func() actors.Caps
}

var _ actors.Client = client{}

// CallFunc sends one of mm's requests (method, params) to the client for
// a session, behind what the session sent before, and waits for the
// client's answer or ctx (then the request is abandoned).
type CallFunc func(ctx context.Context, sessionID, method string, params any) (json.RawMessage, error)

// NewClient is the client as the actors ask it, reached through call; forms
// says whether it shows forms, caps its session capabilities. A node of
// mm's cluster asks a client of another node so (package grains).
func NewClient(call CallFunc, forms func() bool, caps func() actors.Caps) actors.Client {
	return client{call: call, forms: forms, caps: caps}
}

// RequestPermission asks the client through the session's ordered writer,
// behind the tool_call it is about, as one of mm's own calls.
func (c client) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	raw, err := c.call(ctx, string(p.SessionId), acp.ClientMethodSessionRequestPermission, p)
	if err != nil {
		return acp.RequestPermissionResponse{}, err
	}
	var r acp.RequestPermissionResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return acp.RequestPermissionResponse{}, fmt.Errorf("the answer could not be read: %v", err)
	}
	return r, nil
}

// Forms says the client announced elicitation.form at initialize (the
// session is this client's: a session asks the client it is attached to).
func (c client) Forms(string) bool { return c.forms() }

// Caps are the session capabilities the client announced at initialize.
func (c client) Caps(string) actors.Caps { return c.caps() }

// maxFormAnswerBytes bounds the answer to a form that mm decodes: an
// editor may send up to acp.maxLineBytes, and a million-item list costs
// seconds and hundreds of MiB to decode. ask_user's answers may hold
// tools.MaxOutputBytes of text, which JSON escapes may make up to six
// times longer; a form relayed from an asked agent gets as much.
const maxFormAnswerBytes = 8 * tools.MaxOutputBytes

// Elicit sends elicitation/create (form mode) as the seed's table says:
// sessionId and toolCallId at the top, with a copy in
// _meta["mm.elicitationScope"]. An answer over maxFormAnswerBytes is not
// decoded: the error wraps actors.ErrAnswerTooLarge.
func (c client) Elicit(ctx context.Context, e actors.Elicitation) (actors.ElicitationResult, error) {
	raw, err := c.call(ctx, e.SessionID, acp.ClientMethodElicitationCreate, elicitation(e.SessionID, e.ToolCallID, "form", map[string]any{
		"message":         e.Message,
		"requestedSchema": e.Schema,
	}))
	if err != nil {
		return actors.ElicitationResult{}, err
	}
	if len(raw) > maxFormAnswerBytes {
		return actors.ElicitationResult{}, fmt.Errorf("%w: %.1f MiB, and mm reads at most %.1f MiB", actors.ErrAnswerTooLarge,
			float64(len(raw))/(1<<20), float64(maxFormAnswerBytes)/(1<<20))
	}
	return elicitAnswer(raw)
}

// elicitation is the params of an elicitation/create in mode for a tool
// call of a session, as the seed's table has them: sessionId and
// toolCallId at the top, a copy in _meta["mm.elicitationScope"], and the
// mode's own fields.
func elicitation(sessionID, toolCallID, mode string, fields map[string]any) map[string]any {
	p := map[string]any{
		"sessionId":  sessionID,
		"toolCallId": toolCallID,
		"mode":       mode,
		"_meta":      map[string]any{actors.ElicitationScopeKey: map[string]any{"sessionId": sessionID, "toolCallId": toolCallID}},
	}
	for k, v := range fields {
		p[k] = v
	}
	return p
}

// elicitAnswer reads the client's answer to an elicitation/create: its
// action (accept, decline, or cancel for anything else) and an accepted
// form's content.
func elicitAnswer(raw json.RawMessage) (actors.ElicitationResult, error) {
	var r acp.UnstableCreateElicitationResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return actors.ElicitationResult{}, fmt.Errorf("the answer could not be read: %v", err)
	}
	switch {
	case r.Accept != nil:
		return actors.ElicitationResult{Action: "accept", Content: r.Accept.Content}, nil
	case r.Decline != nil:
		return actors.ElicitationResult{Action: "decline"}, nil
	}
	return actors.ElicitationResult{Action: "cancel"}, nil
}

// maxURLAnswerBytes bounds the answer to a URL elicitation mm decodes: an
// action, and whatever _meta a client adds.
const maxURLAnswerBytes = 64 << 10

// ElicitURL sends elicitation/create in URL mode: sessionId and toolCallId
// at the top, as a form's, and the page to open. The answer's action is
// accept, decline or cancel; anything else is taken as cancel.
func (c client) ElicitURL(ctx context.Context, e actors.URLElicitation) (string, error) {
	raw, err := c.call(ctx, e.SessionID, acp.ClientMethodElicitationCreate, elicitation(e.SessionID, e.ToolCallID, "url", map[string]any{
		"elicitationId": e.ElicitationID,
		"url":           e.URL,
		"message":       e.Message,
	}))
	if err != nil {
		return "", err
	}
	if len(raw) > maxURLAnswerBytes {
		return "", fmt.Errorf("%w: %d bytes", actors.ErrAnswerTooLarge, len(raw))
	}
	res, err := elicitAnswer(raw)
	return res.Action, err
}
