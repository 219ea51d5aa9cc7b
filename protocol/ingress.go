package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// The ingress is mm's one way in: the handler of the connection's
// jsonrpc.Conn, whose one read loop reads the client's messages, each
// split once into its members by the transport's framer (on stdio a line
// read whole up to acp.maxLineBytes; over the network a WebSocket frame or
// a POST body), checks each and answers what is not a valid message (with
// its id when it had a usable one), keeps the one table of the client's
// requests in flight (past acp.maxPending unanswered, it reads nothing
// more, and the transport pushes back on the client), and delivers the
// responses to mm's own calls (calls.go). Then, in the order read:
//
//   - preempt serves session/cancel, and $/cancel_request of a prompt, at
//     once: they wait for nothing;
//   - Serve serves a request by the method table (methods.go, after
//     acpmethod's), which names every method mm serves once: a session's
//     requests — prompt, set_mode, set_config_option, set_model, load,
//     resume, close, fork, delete — and session/new are served in the
//     order read (each reaches its session's mailbox before the next
//     message is read); initialize, authenticate, logout and session/list
//     on a goroutine each. Every answer goes through the outbox, the one
//     ordered writer, which takes the request out of the Conn's table (its
//     answer goes out once). A method not in the table is answered "Method
//     not found"; every other notification is logged at debug level and
//     dropped.
//
// acp-go-sdk supplies the types and their validation; it reads and writes
// no message of mm's agent side.
//
// Concurrency: Serve and preempt are called by the Conn's read loop only;
// the handlers they call never block on the client or on a turn (they
// wait only for a free session creator).

type ingress struct {
	agent *Agent
	log   *slog.Logger

	// done is closed once the client's stream has ended.
	done chan struct{}
}

// run serves the connection until the client's stream ends or fails, then
// closes done.
func (in *ingress) run(rpc *jsonrpc.Conn) {
	defer close(in.done)
	if err := rpc.Run(); err != nil {
		in.log.Info(fmt.Sprintf("[acp] the client's stream failed: %v", err))
	}
}

// Serve serves one request, or drops a notification preempt did not take.
func (in *ingress) Serve(r *jsonrpc.Request) {
	if !r.IsCall() {
		in.log.Debug(fmt.Sprintf("[acp] notification %s ignored", r.Method))
		return
	}
	if r.Method != acp.AgentMethodInitialize {
		// Anything but initialize needs the actors soon (DeferRuntime).
		in.agent.hub.StartRuntime()
	}
	in.serve(r)
}

// serve serves a request by the method table (methods.go), in the order
// read; a request of a method mm does not have is answered so. A session's
// request is decoded here, once, and served here or handed to the
// connection's Forwarder. A request's panic becomes its internal error.
func (in *ingress) serve(req *jsonrpc.Request) {
	a := in.agent
	method := req.Method
	r := actors.Reply{ID: req.ID, Method: method, Seq: req.Seq}
	m, ok := methods[method]
	var p any
	var rerr *acp.RequestError
	if ok && m.decode != nil {
		a.hub.decodes.Add(1)
		p, rerr = m.decode(req.Params)
		if rerr == nil && m.session && req.Session == "" {
			// A session's request that names none is bad params, not
			// an unknown session "".
			rerr = jsonrpc.ErrInvalidParams.With("sessionId is required")
		}
		if rerr == nil && a.forwarded(m, r, p, req.Params) {
			return
		}
	}
	defer a.survive(method, r)
	switch {
	case !ok:
		a.answer("", r, nil, acp.NewMethodNotFound(method))
	case m.serve != nil:
		m.serve(in, r, req.Params)
	case rerr != nil:
		a.answer("", r, nil, rerr)
	default:
		m.run(a.Caller, r, p, "", nil)
	}
}

// decodeParams decodes and validates a request's params as the SDK does.
func decodeParams(raw json.RawMessage, p interface{ Validate() error }) *acp.RequestError {
	if err := json.Unmarshal(raw, p); err != nil {
		return acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if err := p.Validate(); err != nil {
		return acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return nil
}

// preempt serves session/cancel and the $/cancel_request of a prompt, on
// the read loop, in the order read; it leaves the rest to Serve.
func (in *ingress) preempt(r *jsonrpc.Request) bool {
	a := in.agent
	switch r.Method {
	case acp.AgentMethodSessionCancel:
		if r.IsCall() {
			return false // a request named so is answered Method not found
		}
		var p acp.CancelNotification
		if rerr := decodeParams(r.Params, &p); rerr != nil {
			in.log.Warn(fmt.Sprintf("[acp] session/cancel ignored: %v", rerr))
			return true
		}
		// A session's notification: where its session is.
		if !a.forwarded(methodDef{session: true}, actors.Reply{Method: r.Method}, p, r.Params) {
			_ = a.Cancel(a.ctx, p)
		}
		return true
	case acpmethod.CancelRequest:
		if r.IsCall() {
			return false
		}
		var p acpmethod.CancelRequestParams
		if json.Unmarshal(r.Params, &p) != nil {
			return true
		}
		id, ok := jsonrpc.IDOf(p.RequestID)
		if !ok {
			return true
		}
		if f := a.forward; f != nil && f.CancelRequest(id) {
			return true
		}
		// Only a prompt is cancelled: the others are answered at once, or
		// waited for by their session in order. Its session finds it
		// among its turns, arrived or on its way.
		if in, ok := a.rpc.Lookup(id); ok && in.Method == acp.AgentMethodSessionPrompt {
			a.CancelRequest(in.Session, id)
		}
		return true
	}
	return false
}

// toRequestError keeps an ACP error as it is; any other is mm's own
// failure, whose reason becomes the message.
func toRequestError(err error) *acp.RequestError {
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re
	}
	return jsonrpc.Internal(err.Error(), nil)
}
