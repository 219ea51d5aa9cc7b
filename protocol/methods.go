package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
)

// methods is every ACP method mm serves, each named once: how its params
// are decoded and validated (the SDK's types), who serves it, and how it is
// placed. A request of a method not here is answered "Method not found".
// Adding a method is one entry and its handler (logout is one).
//
// Placement:
//   - session: the request names a session (params.sessionId) and is served
//     in the order read, behind the requests read before it; in a cluster
//     it goes to the node that holds the session (forward.go);
//   - creates: it makes a session (new, fork): ordered too, and placed in
//     a cluster by the id made for it here;
//   - neither: a request about the connection (initialize, authenticate,
//     session/list, logout), served on a goroutine of its own so that a
//     slow one (a listing reads folders) holds no other.
var methods map[string]methodDef

// methodDef is a method's entry. A request about the connection is served
// by serve. A session's request (or one that makes a session) is decoded
// once, by decode, where the client's connection is, and run where its
// session is: here, or on the node of mm's cluster that holds it
// (Caller.Serve), which gets the decoded request, never its JSON.
type methodDef struct {
	serve func(in *ingress, r actors.Reply, params json.RawMessage)
	// decode reads and validates the params into the SDK's type; check
	// validates params decoded elsewhere (another node's, which is not
	// trusted).
	decode func(params json.RawMessage) (any, *acp.RequestError)
	check  func(p any) *acp.RequestError
	// run serves a decoded request and answers r, now or later; sid is
	// the id of the session a creating request makes ("": one is made
	// here); here, on a node of a cluster, is the session's actor serving
	// the call, which takes what the request sends the session there and
	// then (actors.Here; nil: none).
	run func(c *Caller, r actors.Reply, p any, sid string, here *actors.Here)
	// session and creates are the placement, from acpmethod's table: a
	// session's ordered request, or one that makes a session.
	session bool
	creates bool
}

func init() {
	methods = map[string]methodDef{
		acp.AgentMethodInitialize:   initialize(),
		acp.AgentMethodAuthenticate: conn((*Agent).Authenticate),
		acp.AgentMethodLogout:       conn((*Agent).Logout),
		acp.AgentMethodSessionList:  conn((*Agent).ListSessions),
		acp.AgentMethodSessionNew:   making((*Caller).serveNewAs),
		acp.AgentMethodSessionFork:  making((*Caller).serveForkAs),
		acp.AgentMethodSessionPrompt: {decode: decodePrompt, check: checker[acp.PromptRequest](), run: run(func(c *Caller, r actors.Reply, p acp.PromptRequest, _ string, here *actors.Here) {
			c.servePrompt(r, p, here)
		})},
		acp.AgentMethodSessionLoad:            ordered((*Caller).serveLoad),
		acp.AgentMethodSessionResume:          ordered((*Caller).serveResume),
		acp.AgentMethodSessionClose:           ordered((*Caller).serveClose),
		acp.AgentMethodSessionDelete:          ordered((*Caller).serveDelete),
		acp.AgentMethodSessionSetMode:         ordered((*Caller).serveSetMode),
		acp.AgentMethodSessionSetConfigOption: ordered((*Caller).serveSetConfig),
		acpmethod.SetModel:                    ordered((*Caller).serveSetModel),
	}
	// Where each is placed is the one table's to say.
	for name, d := range methods {
		m, ok := acpmethod.Lookup(name)
		if !ok {
			panic("protocol serves " + name + ", which acpmethod does not name")
		}
		d.session, d.creates = m.Ordered && !m.Creates, m.Creates
		methods[name] = d
	}
}

// params is a request's params type: the SDK's, with its validation.
type params[P any] interface {
	*P
	Validate() error
}

// decoder decodes and validates a request's params as P.
func decoder[P any, PP params[P]]() func(json.RawMessage) (any, *acp.RequestError) {
	return func(raw json.RawMessage) (any, *acp.RequestError) {
		var p P
		if rerr := decodeParams(raw, PP(&p)); rerr != nil {
			return nil, rerr
		}
		return p, nil
	}
}

// checker validates decoded params of type P as decodeParams does.
func checker[P any, PP params[P]]() func(any) *acp.RequestError {
	return func(p any) *acp.RequestError {
		v, ok := p.(P)
		if !ok {
			return acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("params of type %T", p)})
		}
		if err := PP(&v).Validate(); err != nil {
			return acp.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		return nil
	}
}

// run serves a decoded request of type P; sid is the id of the session a
// creating request makes.
func run[P any](serve func(*Caller, actors.Reply, P, string, *actors.Here)) func(*Caller, actors.Reply, any, string, *actors.Here) {
	return func(c *Caller, r actors.Reply, p any, sid string, here *actors.Here) {
		v, ok := p.(P)
		if !ok {
			c.answer("", r, nil, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("%s: params of type %T", r.Method, p)}))
			return
		}
		serve(c, r, v, sid, here)
	}
}

// ordered is a session's request: served in the session's order, in the
// ingress's goroutine before the next line is read; its handler answers r,
// now or later.
func ordered[P any, PP params[P]](serve func(*Caller, actors.Reply, P, *actors.Here)) methodDef {
	return methodDef{decode: decoder[P, PP](), check: checker[P, PP](), run: run(func(c *Caller, r actors.Reply, p P, _ string, here *actors.Here) { serve(c, r, p, here) })}
}

// making is a request that makes a session, ordered too; its handler is
// given the new session's id, or "" to make one.
func making[P any, PP params[P]](serve func(*Caller, actors.Reply, P, string, *actors.Here)) methodDef {
	return methodDef{decode: decoder[P, PP](), check: checker[P, PP](), run: run(serve)}
}

// sessionOf is the session a decoded request names.
func sessionOf(p any) string {
	switch v := p.(type) {
	case acp.PromptRequest:
		return string(v.SessionId)
	case acp.LoadSessionRequest:
		return string(v.SessionId)
	case acp.ResumeSessionRequest:
		return string(v.SessionId)
	case acp.CloseSessionRequest:
		return string(v.SessionId)
	case acp.UnstableDeleteSessionRequest:
		return string(v.SessionId)
	case acp.SetSessionModeRequest:
		return string(v.SessionId)
	case acp.SetSessionConfigOptionRequest:
		switch {
		case v.ValueId != nil:
			return string(v.ValueId.SessionId)
		case v.Boolean != nil:
			return string(v.Boolean.SessionId)
		}
	case acp.UnstableForkSessionRequest:
		return string(v.SessionId)
	case acpmethod.SetModelRequest:
		return string(v.SessionId)
	case acp.CancelNotification:
		return string(v.SessionId)
	}
	return ""
}

// conn serves a request about the connection on a goroutine of its own
// and answers it with what its handler returns, as the SDK did: the
// result, or the error (an ACP error as it is, a cancel as
// "Request cancelled", any other as an internal error carrying its text).
func conn[P any, PP params[P], R any](serve func(*Agent, context.Context, P) (R, error)) methodDef {
	return methodDef{serve: func(in *ingress, r actors.Reply, raw json.RawMessage) {
		a := in.agent
		var p P
		if rerr := decodeParams(raw, PP(&p)); rerr != nil {
			a.answer("", r, nil, rerr)
			return
		}
		go func() {
			defer a.survive(r.Method, r)
			res, err := serve(a, a.ctx, p)
			if err != nil {
				a.answer("", r, nil, sdkError(err))
				return
			}
			a.answer("", r, res, nil)
		}()
	}}
}

// sdkError is the error the SDK answered a handler's err with.
func sdkError(err error) *acp.RequestError {
	var re *acp.RequestError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, context.Canceled):
		return acp.NewRequestCancelled(map[string]any{"error": err.Error()})
	}
	return acp.NewInternalError(map[string]any{"error": err.Error()})
}

// initialize is conn((*Agent).Initialize) that first notes the client's
// session capabilities from the raw params.
func initialize() methodDef {
	d := conn((*Agent).Initialize)
	serve := d.serve
	d.serve = func(in *ingress, r actors.Reply, raw json.RawMessage) {
		in.agent.noteCaps(raw)
		serve(in, r, raw)
	}
	return d
}
