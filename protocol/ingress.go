package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/rpcerr"
	"github.com/mm-agent/mm/jsonrpc"
)

// The ingress is mm's one way in: the connection's reader (run), on a
// goroutine of its own. Its messages come from a jsonrpc.Source, each split
// once into its JSON-RPC members (jsonrpc.Parse): on stdio each line is read
// whole (up to acp.maxLineBytes, jsonrpc.Lines); over the network the
// transport has split the message to route it, and hands that split over
// (serve's inbox), so nothing parses a message twice. Then:
//
//   - what is not a valid JSON-RPC message gets its error (with the
//     message's id when it has a usable one: one read from the first bytes
//     of a line too long to read) and goes no further; so does a message
//     with a member twice, and a request whose id is null, which no answer
//     could name;
//   - a request takes a place in pending first (pending.go): when too many
//     are unanswered, the ingress waits, and stops reading — until the
//     client's stream ends, when the source can say so unread (serve's
//     inbox): the request is then answered with an error, and the
//     connection ends although the requests before it wait for the
//     client (a permission it will never answer);
//   - a request is served by the method table (methods.go), which names
//     every method mm serves once: a session's requests — prompt,
//     set_mode, set_config_option, load, resume, close, fork, delete — and
//     session/new are served in the order read (each reaches its session's
//     mailbox before the next line is read); initialize,
//     authenticate, logout and session/list on a goroutine each. Every
//     answer goes through the outbox, the one ordered writer. A method not
//     in the table is answered "Method not found";
//   - session/cancel, and $/cancel_request of a prompt, cancel as they say;
//     every other notification is logged at debug level and dropped;
//   - a response goes to the call of mm's it answers (calls.go: a
//     permission request, an elicitation, whichever node's session
//     asked); one that answers nothing is dropped.
//
// acp-go-sdk supplies the types and their validation; it no longer reads or
// writes a line of mm's agent side.
//
// Concurrency: route is called by run only; the handlers it calls never
// block on the client or on a turn (they wait only for a place in
// pending, or a free session creator).

type ingress struct {
	src     jsonrpc.Source
	max     int // acp.maxLineBytes
	agent   *Agent
	out     io.Writer // stdout, for the errors of lines that go no further
	log     *slog.Logger
	pending *pending

	// done is closed once the client's stream has ended.
	done chan struct{}
	// ended, when the source can say so without being read (serve's
	// inbox: Ended), is closed once the client's stream has ended: a
	// request that waits for a place in pending waits no more.
	ended <-chan struct{}
}

func newIngress(src jsonrpc.Source, maxLine int, a *Agent, out io.Writer, log *slog.Logger, p *pending) *ingress {
	in := &ingress{src: src, max: maxLine, agent: a, out: out, log: log, pending: p, done: make(chan struct{})}
	if e, ok := src.(interface{ Ended() <-chan struct{} }); ok {
		in.ended = e.Ended()
	}
	return in
}

// run reads the client's messages until its stream ends or fails, serving
// each, then closes done.
func (in *ingress) run() {
	defer close(in.done)
	for {
		m, err := in.src.Next()
		switch {
		case m.TooLong > 0:
			_, _ = in.out.Write(LineTooLong(m.Line, m.TooLong, in.max))
		case m.Line != nil:
			in.route(&m)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				in.log.Info(fmt.Sprintf("[acp] the client's stream failed: %v", err))
			}
			return
		}
	}
}

// LineTooLong is mm's answer to a line of size bytes, longer than max
// (acp.maxLineBytes): jsonrpc.LineTooLong.
func LineTooLong(head []byte, size, max int) []byte {
	return jsonrpc.LineTooLong(head, size, configs.Bytes(max).String())
}

// route serves one message.
func (in *ingress) route(m *jsonrpc.Message) {
	if err := m.Err; err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			in.reply(nil, acp.NewParseError(map[string]any{"error": "the line is not valid JSON: " + err.Error()}))
		} else {
			in.reply(nil, acp.NewInvalidRequest(map[string]any{"error": "a JSON-RPC message is a JSON object"}))
		}
		return
	}
	dup, twice := m.Dup, m.Twice
	id := m.ID
	if id != nil && !validID(id) {
		in.reply(nil, acp.NewInvalidRequest(map[string]any{"error": "id must be a string, a number or null"}))
		return
	}
	if twice {
		if dup == "id" {
			id = nil // which one?
		}
		in.reply(id, acp.NewInvalidRequest(map[string]any{"error": fmt.Sprintf("the member %q appears twice in the message", dup)}))
		return
	}
	if m.JSONRPC != nil && string(m.JSONRPC) != `"2.0"` {
		in.reply(id, acp.NewInvalidRequest(map[string]any{"error": `jsonrpc must be "2.0"`}))
		return
	}
	if m.Method == nil {
		if id != nil && (m.Result != nil || m.Error != nil) {
			if string(id) == "null" {
				// A response to no request of ours (the client's answer
				// to a line it could not read): nothing waits for it.
				in.log.Debug("[acp] a response with a null id ignored")
				return
			}
			if in.agent.calls.answered(id, m.Result, m.Error) {
				// One of mm's own calls (calls.go), a session's served
				// here or on another node of a cluster (Sink.Ask).
				return
			}
			// A response to nothing mm waits for: an answer after its
			// request was given up, or to nothing mm asked.
			in.log.Debug(fmt.Sprintf("[acp] a response to no request of mm's ignored (id %s)", id))
			return
		}
		in.reply(id, acp.NewInvalidRequest(map[string]any{"error": "a request needs a method, a response a result or an error"}))
		return
	}
	var method string
	if m.Method[0] != '"' || json.Unmarshal(m.Method, &method) != nil || method == "" {
		in.reply(id, acp.NewInvalidRequest(map[string]any{"error": "method must be a non-empty string"}))
		return
	}
	if len(m.Params) > 0 && m.Params[0] == '{' {
		if dup, twice := jsonrpc.DuplicateKey(m.Params); twice {
			in.reply(id, acp.NewInvalidRequest(map[string]any{"error": fmt.Sprintf("the member %q appears twice in params", dup)}))
			return
		}
	}
	if id == nil {
		in.notification(method, m.Params)
		return
	}
	if string(id) == "null" {
		// JSON-RPC 2.0 allows it and advises against it; the SDK takes
		// such a request for a notification and never answers it.
		in.reply(id, acp.NewInvalidRequest(map[string]any{"method": method,
			"error": "a request's id must be a string or a number: with a null id no answer could name its request"}))
		return
	}
	if !in.pending.take(in.ended) {
		// The client's stream ended while the request waited for a
		// place, behind requests that may wait for the client (a
		// permission it will not answer): it is answered now, so that
		// the connection can end.
		in.reply(id, rpcerr.Internal("the connection ended before this request could be served", map[string]any{"method": method}))
		return
	}
	id = append(json.RawMessage(nil), id...)
	if method != acp.AgentMethodInitialize {
		// Anything but initialize needs the actors soon (DeferRuntime).
		in.agent.hub.StartRuntime()
	}
	in.serve(method, id, m.Params)
}

// serve serves a request by the method table (methods.go), in the order
// read; a request of a method mm does not have is answered so. A session's
// request is decoded here, once, and served here or handed to the
// connection's Forwarder. A request's panic becomes its internal error.
func (in *ingress) serve(method string, id, params json.RawMessage) {
	a := in.agent
	m, ok := methods[method]
	var p any
	var rerr *acp.RequestError
	if ok && m.decode != nil {
		a.hub.decodes.Add(1)
		p, rerr = m.decode(params)
		if rerr == nil && a.forwarded(m, method, id, p) {
			return
		}
	}
	r := a.request(id, method)
	defer a.survive(method, r)
	switch {
	case !ok:
		a.answer("", r, nil, acp.NewMethodNotFound(method))
	case m.serve != nil:
		m.serve(in, r, params)
	case rerr != nil:
		a.answer("", r, nil, rerr)
	default:
		m.run(a.Caller, r, p, "")
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

// notification serves session/cancel and the $/cancel_request of a
// prompt; it drops the rest.
func (in *ingress) notification(method string, params json.RawMessage) {
	a := in.agent
	switch method {
	case acp.AgentMethodSessionCancel:
		var p acp.CancelNotification
		if rerr := decodeParams(params, &p); rerr != nil {
			in.log.Warn(fmt.Sprintf("[acp] session/cancel ignored: %v", rerr))
			return
		}
		if !a.forwarded(methodDef{session: true}, method, nil, p) {
			_ = a.Cancel(a.ctx, p)
		}
		return
	case "$/cancel_request":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(params, &p) == nil && len(p.RequestID) > 0 && validID(p.RequestID) {
			if f := a.forward; f != nil && f.CancelRequest(p.RequestID) {
				return
			}
			a.prompts.cancel(p.RequestID)
		}
		// A cancel of a request that is not a prompt: the others are
		// answered at once, or waited for by their session in order.
		return
	}
	in.log.Debug(fmt.Sprintf("[acp] notification %s ignored", method))
}

// reply writes the error response of a line that goes no further. It waits
// for stdout: a client that reads nothing stops being read too.
func (in *ingress) reply(id json.RawMessage, rerr *acp.RequestError) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(&rpcMessage{JSONRPC: "2.0", ID: id, Error: said(rerr)})
	if err != nil {
		return
	}
	_, _ = in.out.Write(append(b, '\n'))
}

// toRequestError keeps an ACP error as it is; any other is mm's own
// failure, whose reason becomes the message.
func toRequestError(err error) *acp.RequestError {
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re
	}
	return rpcerr.Internal(err.Error(), nil)
}
