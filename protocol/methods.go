package protocol

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/coder/acp-go-sdk"

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

type methodDef struct {
	serve   func(in *ingress, r actors.Reply, params json.RawMessage)
	session bool
	creates bool
}

func init() {
	methods = map[string]methodDef{
		acp.AgentMethodInitialize:             conn((*Agent).Initialize),
		acp.AgentMethodAuthenticate:           conn((*Agent).Authenticate),
		acp.AgentMethodLogout:                 conn((*Agent).Logout),
		acp.AgentMethodSessionList:            conn((*Agent).ListSessions),
		acp.AgentMethodSessionNew:             {serve: ordered((*Agent).serveNew), creates: true},
		acp.AgentMethodSessionFork:            {serve: ordered((*Agent).serveFork), creates: true},
		acp.AgentMethodSessionPrompt:          {serve: (*ingress).prompt, session: true},
		acp.AgentMethodSessionLoad:            {serve: ordered((*Agent).serveLoad), session: true},
		acp.AgentMethodSessionResume:          {serve: ordered((*Agent).serveResume), session: true},
		acp.AgentMethodSessionClose:           {serve: ordered((*Agent).serveClose), session: true},
		acp.AgentMethodSessionDelete:          {serve: ordered((*Agent).serveDelete), session: true},
		acp.AgentMethodSessionSetMode:         {serve: ordered((*Agent).serveSetMode), session: true},
		acp.AgentMethodSessionSetConfigOption: {serve: ordered((*Agent).serveSetConfig), session: true},
	}
}

// params is a request's params type: the SDK's, with its validation.
type params[P any] interface {
	*P
	Validate() error
}

// ordered serves a session's request (or one that creates a session) in
// the ingress's goroutine, before the next line is read; its handler
// answers r, now or later.
func ordered[P any, PP params[P]](serve func(*Agent, actors.Reply, P)) func(*ingress, actors.Reply, json.RawMessage) {
	return func(in *ingress, r actors.Reply, raw json.RawMessage) {
		var p P
		if rerr := decodeParams(raw, PP(&p)); rerr != nil {
			in.agent.answer("", r, nil, rerr)
			return
		}
		serve(in.agent, r, p)
	}
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
