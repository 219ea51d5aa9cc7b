package protocol

import (
	"fmt"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// How the requests the edge serves are answered. Every answer goes through
// the outbox, behind what its session queued before it: a session answers
// with its own plain results (actors.TurnResult, actors.Outcome), the edge
// with an edgeAnswer; encode turns either into the ACP response. The
// outbox answers each request it expects once (request).

// edgeAnswer is an answer the edge gives itself: a result or an error.
type edgeAnswer struct {
	result any
	err    *acp.RequestError
}

// request names a request of a remote client's, served here: its
// connection, which answers it once, is on the client's node.
func (c *Caller) request(id jsonrpc.ID, method string) actors.Reply {
	return actors.NewReply(id, method)
}

// answer answers r, unless it was answered already, behind everything
// queued so far for session sid ("" for none).
func (c *Caller) answer(sid string, r actors.Reply, result any, rerr *acp.RequestError) {
	c.out.Answer(sid, r, &edgeAnswer{result: result, err: rerr})
}

// sent answers r with refused, when its session refused it: its end was
// on its way when r was sent to it (actors.Session's methods say so).
func (c *Caller) sent(sid string, r actors.Reply, refused any) {
	if refused != nil {
		c.out.Answer(sid, r, refused)
	}
}

// encode turns the answer to r into its ACP result or error.
func (c *Caller) encode(sid string, r actors.Reply, res any) (any, *acp.RequestError) {
	switch v := res.(type) {
	case *edgeAnswer:
		return v.result, v.err
	case *actors.TurnResult:
		if v.Refused != "" {
			// The reason is the message: an editor shows the message only.
			return nil, &acp.RequestError{Code: jsonrpc.ErrInvalidRequest.Code, Message: v.Refused,
				Data: map[string]any{"sessionId": sid, "error": v.Refused}}
		}
		if v.Err != "" {
			// The session logged it ("turn failed").
			return nil, jsonrpc.Internal(v.Err, nil)
		}
		out := acp.PromptResponse{StopReason: v.StopReason, Usage: v.Usage}
		if v.Provenance.SessionID != "" {
			out.Meta = provenanceMeta(v.Provenance) // /new and /compact change it
		}
		return out, nil
	case *actors.Outcome:
		if v.Err != "" {
			return nil, acp.NewInvalidParams(map[string]any{"error": v.Err})
		}
		switch r.Method {
		case acp.AgentMethodSessionSetMode:
			return acp.SetSessionModeResponse{}, nil
		case acpmethod.SetModel:
			return struct{}{}, nil
		case acp.AgentMethodSessionSetConfigOption:
			return acp.SetSessionConfigOptionResponse{Meta: c.runtime().SandboxMeta(v.Sandbox, v.Network), ConfigOptions: c.configOptions(v.Model, v.Sandbox, v.Network)}, nil
		case acp.AgentMethodSessionLoad:
			return acp.LoadSessionResponse{Meta: c.sessionMeta(v.Provenance, v.Sandbox, v.Network), Modes: modes(v.Mode), ConfigOptions: c.configOptions(v.Model, v.Sandbox, v.Network)}, nil
		case acp.AgentMethodSessionResume:
			return acp.ResumeSessionResponse{Meta: c.sessionMeta(v.Provenance, v.Sandbox, v.Network), Modes: modes(v.Mode), ConfigOptions: c.configOptions(v.Model, v.Sandbox, v.Network)}, nil
		}
	}
	return nil, c.internal(r.Method, fmt.Errorf("mm has no answer of type %T for %s", res, r.Method))
}

// surviveSDK is survive for the handlers that return their answer
// (methods.go's conn: initialize, session/list), as the SDK's did.
func (a *Agent) surviveSDK(method string, err *error) {
	if p := recover(); p != nil {
		*err = a.internal(method, fmt.Errorf("mm failed: %v", p))
	}
}

// survive turns a panic in a request's handler into an internal error for
// that request (unless it was answered already): one bad request must not
// end every session.
func (c *Caller) survive(method string, r actors.Reply) {
	if p := recover(); p != nil {
		c.answer("", r, nil, c.internal(method, fmt.Errorf("mm failed: %v", p)))
	}
}

// internal is the internal error of a request that failed in mm itself,
// logged: its one-line reason is the error's message.
func (c *Caller) internal(method string, err error) *acp.RequestError {
	c.log.Error(fmt.Sprintf("[acp] %s failed: %v", method, err))
	return jsonrpc.Internal(err.Error(), nil)
}

// Said is rerr as it goes on the wire: an "Invalid params" error says why
// in its message too (its data's "error"), since a client may show only
// the message (acpx prints "[error] RUNTIME: Invalid params"). The errors
// that cross nodes (package grains) go through it too, their data JSON on
// the way.
func Said(rerr *acp.RequestError) *acp.RequestError {
	if rerr == nil || rerr.Code != -32602 || rerr.Message != "Invalid params" {
		return rerr
	}
	data, ok := rerr.Data.(map[string]any)
	if !ok {
		return rerr
	}
	why, ok := data["error"].(string)
	if !ok || why == "" {
		return rerr
	}
	return &acp.RequestError{Code: rerr.Code, Message: "Invalid params: " + why, Data: rerr.Data}
}

// codeNoSession is ACP's error for a session the agent does not have
// (ErrorCode's resource_not_found), answered with data.sessionId.
const codeNoSession = -32002
