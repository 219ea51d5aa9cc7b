package protocol

import (
	"encoding/json"
	"io"
	"time"

	"github.com/mm-agent/mm/actors"
)

// Forwarder carries a connection's session requests to where their
// sessions live: the grains of mm's cluster (package grains). With one,
// the connection's node keeps the edge — the ingress, the ordered writer,
// the bound on requests, the transport — and serves here only what names
// no session (initialize, session/list); every request and notification of
// a session is handed to Forward in the order read, and the lines its
// session writes come back through the writer the Forwarder was made with.
type Forwarder interface {
	// Forward hands on one request (id set) or notification (id nil) of
	// session sid, in read order, decoded and validated here: p is its
	// params as the SDK's type (acp.PromptRequest, acp.CancelNotification,
	// …); for session/new and session/fork, sid is the id of the session
	// to make, chosen here. It queues; it must not wait for the session.
	Forward(sid, method string, id json.RawMessage, p any)
	// CancelRequest hands on a $/cancel_request; it reports false when
	// requestID names no request it forwarded.
	CancelRequest(requestID json.RawMessage) bool
	// Answer hands on the client's answer to a request a session made
	// elsewhere; it reports false when the id is not one of those.
	Answer(id, result, rerr json.RawMessage) bool
	// Close ends the connection's forwarding: the client is gone. It
	// returns once what was forwarded is answered, or after wait.
	Close(wait time.Duration)
}

// NewForwarder makes a connection's Forwarder. out takes whole lines for
// the client (the connection's writer); answered is told how many of them
// were responses to the client's requests, whose places in the
// connection's bound are free then.
type NewForwarder func(out io.Writer, answered func(n int)) Forwarder

// forwarded hands a decoded request (id set) or notification of a session
// to the connection's Forwarder; it reports false for what is served here
// (a request that names no session is, and answered so).
func (a *Agent) forwarded(m methodDef, name string, id json.RawMessage, p any) bool {
	f := a.forward
	if f == nil {
		return false
	}
	var sid string
	switch {
	case m.creates:
		// The cluster places a session by its id: it is made here.
		sid = actors.NewSessionID(time.Now())
	case m.session:
		sid = sessionOf(p)
		if sid == "" {
			return false
		}
	default:
		return false
	}
	f.Forward(sid, name, id, p)
	return true
}
