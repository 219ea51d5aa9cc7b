package protocol

import (
	"context"
	"encoding/json"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// Forwarder carries a connection's session requests to where their
// sessions live: the grains of mm's cluster (package grains). With one,
// the connection's node keeps the edge — the ingress, the ordered writer,
// the bound on requests, the transport, mm's calls to the client — and
// serves here only what names no session (initialize, session/list);
// every request and notification of a session is handed to Forward in the
// order read, decoded here, and what its session sends back comes through
// the Sink the Forwarder was made with, typed: nothing is parsed again.
type Forwarder interface {
	// Forward hands on one request (r.ID set) or notification (r.ID nil)
	// of session sid, in read order, decoded and validated here: p is its
	// params as the SDK's type (acp.PromptRequest, acp.CancelNotification,
	// …); for session/new and session/fork, sid is the id of the session
	// to make, chosen here. r is the request as the connection's outbox
	// expects its answer (Sink.Answer). raw is the params as the client
	// sent them, which p was decoded and checked from: in a cluster they
	// cross nodes as sent (acp-go-sdk's types write back less than they
	// read: a content block's _meta and annotations). It queues; it must
	// not wait for the session.
	Forward(sid string, r actors.Reply, p any, raw json.RawMessage)
	// NewSessionID is the id of a session this connection opens
	// (session/new, session/fork): the cluster places a session by its
	// id, so the Forwarder chooses it.
	NewSessionID() string
	// CancelRequest hands on a $/cancel_request; it reports false when
	// requestID names no request it forwarded.
	CancelRequest(requestID jsonrpc.ID) bool
	// Close ends the connection's forwarding: the client is gone. It
	// returns once what was forwarded is answered, or after wait.
	Close(wait time.Duration)
}

// NewForwarder makes a connection's Forwarder, which writes to the
// connection through sink.
type NewForwarder func(sink Sink) Forwarder

// Sink is a connection as its Forwarder writes to it: what the sessions
// served elsewhere send back goes through the connection's own ordered
// outbox, behind what was queued before it for the same session, and
// their questions go to the client as mm's own calls. Its methods queue
// and never wait on the client (Ask's wait does), and may be called from
// any goroutine; what is queued for one session is written in the order
// it was queued.
type Sink struct{ a *Agent }

// Giver takes back the bytes of a session's stream budget once what held
// them is written (an actors.Budget; in a cluster, the credit sent back to
// the session's node).
type Giver interface{ Give(n int) }

// Chunk queues a plain text agent_message_chunk of session sid (with
// thought, an agent_thought_chunk) of message id (none if ""), which holds
// n bytes of the session's stream budget, given back to paid once it is
// written. Adjacent chunks of one message are written as one, as a local
// session's are.
func (k Sink) Chunk(sid, text, id string, thought bool, paid Giver, n int) {
	k.a.box.stream(sid, TextChunk(text, id, thought), paid, n)
}

// Update queues a session/update of session sid whose update is raw: the
// SDK's JSON of it, made where the session runs, written as it is.
func (k Sink) Update(sid string, raw json.RawMessage, paid Giver, n int) {
	k.a.box.updateRaw(sid, raw, paid, n)
}

// Usage queues a usage_update of session sid (no _meta, no cost): the
// tokens its context holds and the model's window. Adjacent ones of a
// session are written as the last, as a local session's are.
func (k Sink) Usage(sid string, used, size int) {
	k.a.box.Update(sid, acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{Used: used, Size: size}})
}

// Answer answers request r, once, behind what is queued for session sid:
// with result (JSON, written as it is) or rerr. An answer to a request
// answered already is dropped.
func (k Sink) Answer(sid string, r actors.Reply, result json.RawMessage, rerr *acp.RequestError) {
	if rerr == nil && result == nil {
		result = json.RawMessage("{}")
	}
	var res any
	if result != nil {
		res = result
	}
	k.a.answer(sid, r, res, rerr)
}

// Note keeps note with request r in the connection's table while it is
// in flight (jsonrpc.Conn.Annotate): what a Forwarder knows of a request
// it handed on (its node) has no table of its own. False when r is
// answered already.
func (k Sink) Note(r actors.Reply, note any) bool { return k.a.rpc.Annotate(r.ID, r.Seq, note) }

// NoteOf is the note of request id while it is in flight; false when it
// is answered.
func (k Sink) NoteOf(id jsonrpc.ID) (any, bool) {
	in, ok := k.a.rpc.Lookup(id)
	return in.Note, ok
}

// Notes are the notes of the requests in flight that keep keeps.
func (k Sink) Notes(keep func(note any) bool) []any { return k.a.rpc.Notes(keep) }

// Deliver sends msg to pid once everything queued before it for session
// sid is written.
func (k Sink) Deliver(sid string, pid *actor.PID, msg any) { k.a.box.Deliver(sid, pid, msg) }

// Ask queues a request of mm's for the client (method, its params as
// JSON), behind what is queued for session sid, and returns the wait for
// the client's answer: ended by ctx, it abandons the request and tells the
// client so ($/cancel_request).
func (k Sink) Ask(sid, method string, params json.RawMessage) func(context.Context) (json.RawMessage, error) {
	return k.a.ask(sid, method, params)
}

// AskNoted is Ask for a call that keeps note with it in the connection's
// table of its calls: Abandon gives it up by its note (the client is told
// with $/cancel_request, and its wait returns jsonrpc.ErrAbandoned). What
// a Forwarder knows of a question it put has no table of its own.
func (k Sink) AskNoted(sid, method string, params json.RawMessage, note any) func(context.Context) (json.RawMessage, error) {
	return k.a.askNoted(sid, method, params, note)
}

// Abandon gives up the calls of AskNoted whose note keep keeps, and says
// how many.
func (k Sink) Abandon(keep func(note any) bool) int { return k.a.rpc.Abandon(keep) }

// Forms says whether the client shows forms (elicitation.form).
func (k Sink) Forms() bool { return k.a.forms() }

// Caps are the client's session capabilities.
func (k Sink) Caps() actors.Caps { return k.a.caps() }

// forwarded hands a decoded request (r.ID set) or notification of a
// session to the connection's Forwarder; it reports false for what is
// served here (a request that names no session is, and answered so).
func (a *Agent) forwarded(m methodDef, r actors.Reply, p any, raw json.RawMessage) bool {
	f := a.forward
	if f == nil {
		return false
	}
	var sid string
	switch {
	case m.creates:
		sid = f.NewSessionID()
	case m.session:
		sid = sessionOf(p)
		if sid == "" {
			return false
		}
	default:
		return false
	}
	f.Forward(sid, r, p, raw)
	return true
}
