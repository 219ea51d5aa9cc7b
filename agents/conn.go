package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/jsonrpc"
)

// mm's connection to an asked agent: one jsonrpc.Conn over the agent's
// stdout (its messages, one a line) and stdin (mm's). The Conn's read loop
// reads each message once and checks it, answers a message that breaks
// JSON-RPC's rules (an error response, as to any peer), and hands on the
// rest, in the order read:
//
//   - the answer to one of mm's requests goes to the call that waits for
//     it: every update read before it has reached the client by then;
//   - session/update is delivered on the read loop to the client, which
//     keeps what it needs of the answer, within a bound; an agent that
//     writes faster than mm reads is held back by its pipe;
//   - the agent's other notifications are dropped (logged at debug
//     level), but $/cancel_request, which gives up one of its requests;
//   - a request of the agent's takes one of maxRequests places, and is
//     answered from a goroutine of its own (a person may take a while); one
//     past them is refused at once;
//   - a line longer than maxLine is read to its end and left out (source):
//     a response becomes an error, that says so, for the request that
//     waits for it; a request gets the Conn's answer to a line too long;
//     an update leaves a note in the answer;
//   - a line that is not JSON is dropped with a warning (source).

// maxLine bounds a line of the agent's, newline included: the bound of
// acp-go-sdk's reader, which mm's client once was.
const maxLine = 10 << 20

// maxRequests bounds the agent's requests being answered at once.
const maxRequests = 16

// connect makes a's connection over the agent's output r and input w, and
// starts its read loop.
func (a *Agent) connect(r io.Reader, w io.Writer) {
	src := &source{lines: jsonrpc.Lines(r, maxLine-1), a: a}
	// One place more than maxRequests: the request past them takes it,
	// and is refused on the read loop, which never waits for a place.
	a.rpc = jsonrpc.New(src, jsonrpc.NewLineWriter(w), jsonrpc.Options{
		Handler: jsonrpc.HandlerFunc(a.serve), Preempt: a.preempt, Max: maxRequests + 1,
		MaxLine: maxLine, LimitName: "what mm reads of an asked agent", Log: a.log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	a.ctx, a.read = ctx, make(chan struct{})
	go func() {
		defer close(a.read)
		defer cancel()
		if err := a.rpc.Run(); err != nil {
			a.log.Debug("the agent's output ended: " + err.Error())
		}
	}()
}

// served is the tag of a request of the agent's: the cancel of its
// answer, once it is being answered, for $/cancel_request. It is read and
// written on the read loop only.
type served struct{ cancel context.CancelFunc }

// serve serves what the agent sends, on the read loop.
func (a *Agent) serve(r *jsonrpc.Request) {
	switch {
	case !r.IsCall() && r.Method == acp.ClientMethodSessionUpdate:
		a.update(r.Params)
	case !r.IsCall():
		a.log.Debug("a notification of the agent was dropped", "method", r.Method)
	case a.rpc.Pending() > maxRequests:
		why := fmt.Sprintf("mm is already answering %d requests of this agent; %s was refused", maxRequests, r.Method)
		a.warn("a request of the agent was refused: " + why)
		a.rpc.Respond(r.ID, nil, jsonrpc.Internal(why, nil))
	case r.Method == acp.ClientMethodSessionRequestPermission:
		answer(a, r, a.client.RequestPermission)
	case r.Method == acp.ClientMethodElicitationCreate:
		answer(a, r, a.client.Elicit)
	default:
		// mm offers no file system or terminal to an asked agent: it works
		// in its own cwd with its own tools.
		a.rpc.Respond(r.ID, nil, jsonrpc.ErrMethodNotFound.Data(map[string]any{"method": r.Method}))
	}
}

// answer reads r's params as a P, as acp-go-sdk's client reads them
// (decoded, then validated), and answers r from a goroutine with what ask
// says; the ask's context ends with the connection, or with the agent's
// $/cancel_request of r.
func answer[P, R any, PP interface {
	*P
	Validate() error
}](a *Agent, r *jsonrpc.Request, ask func(context.Context, P) (R, error)) {
	var p P
	err := json.Unmarshal(r.Params, &p)
	if err == nil {
		err = PP(&p).Validate()
	}
	if err != nil {
		a.rpc.Respond(r.ID, nil, jsonrpc.ErrInvalidParams.With(err.Error()))
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	if s, ok := r.Tag.(*served); ok {
		s.cancel = cancel
	}
	go func() {
		defer cancel()
		res, err := ask(ctx, p)
		if err != nil {
			a.rpc.Respond(r.ID, nil, jsonrpc.ErrorOf(err))
			return
		}
		a.rpc.Respond(r.ID, res, nil)
	}()
}

// preempt serves the agent's $/cancel_request of one of its requests: the
// answer being sought is given up (the relay sees its context end).
func (a *Agent) preempt(r *jsonrpc.Request) bool {
	if r.IsCall() || r.Method != acpmethod.CancelRequest {
		return false
	}
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(r.Params, &p) != nil {
		return true
	}
	if id, ok := jsonrpc.IDOf(p.RequestID); ok {
		if in, ok := a.rpc.Lookup(id); ok {
			if s, ok := in.Tag.(*served); ok && s.cancel != nil {
				s.cancel()
			}
		}
	}
	return true
}

// update gives the client what it keeps of a session/update: the text of
// the agent's message.
func (a *Agent) update(params json.RawMessage) {
	var n struct {
		SessionID acp.SessionId `json:"sessionId"`
		Update    struct {
			Kind    string `json:"sessionUpdate"`
			Content struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	if err := json.Unmarshal(params, &n); err != nil {
		a.warn("a session/update that cannot be read was dropped: " + err.Error())
		return
	}
	if n.Update.Kind == "agent_message_chunk" && n.Update.Content.Type == "text" {
		a.client.chunk(n.SessionID, n.Update.Content.Text)
	}
}

// warn logs what was dropped or refused: the first ones, then one in every
// power of two. It is called on the read loop only.
func (a *Agent) warn(msg string) {
	a.dropped++
	if n := a.dropped; n <= 8 || n&(n-1) == 0 {
		a.log.Warn(fmt.Sprintf("%s (%d dropped or refused so far)", msg, n))
	}
}

// source is the agent's output as its Conn reads it: its lines, of
// maxLine at most, newline included. A longer one is left out here, as
// the agent must hear (overlong), and so is a line that is not JSON; a
// request is tagged for its cancel.
type source struct {
	lines jsonrpc.Source
	a     *Agent
}

func (s *source) Next() (jsonrpc.Message, error) {
	for {
		m, err := s.lines.Next()
		switch {
		case m.TooLong > 0:
			if m, ok := s.a.overlong(m); ok {
				return m, err
			}
		case m.Err != nil:
			// Not answered, as any peer's would be: an agent that writes
			// its logs on stdout by mistake may not read its stdin
			// meanwhile, and the answers would fill its pipe.
			s.a.warn(fmt.Sprintf("a line that is not JSON-RPC was dropped (%d bytes): %.80q", len(m.Line), m.Line))
		case m.ID != nil && m.Method != nil:
			m.Tag = &served{}
			return m, err
		default:
			return m, err
		}
		if err != nil {
			return jsonrpc.Message{}, err
		}
	}
}

// overlong serves a line of the agent's too long to be read, of which only
// its first bytes were kept: an answer to one of mm's requests becomes an
// error for it, that says why; a request goes on to the Conn, which
// answers it; anything else leaves a note in the answer and goes no
// further (false).
func (a *Agent) overlong(m jsonrpc.Message) (jsonrpc.Message, bool) {
	what := fmt.Sprintf("a line of %s, over %s", mib(m.TooLong), mib(maxLine))
	id, method := jsonrpc.HeadID(m.Line), headMethod(m.Line)
	a.warn(fmt.Sprintf("the agent sent %s (method %q); it was dropped", what, method))
	switch {
	case id != nil && method == "":
		why, err := json.Marshal(jsonrpc.Internal(fmt.Sprintf("it sent a response of %s, over %s", mib(m.TooLong), mib(maxLine)), nil))
		if err != nil {
			return jsonrpc.Message{}, false
		}
		return jsonrpc.Message{Line: m.Line, ID: id, Error: why}, true
	case id != nil:
		return m, true
	}
	a.client.note("[mm: the agent sent " + what + "; it was left out]")
	return jsonrpc.Message{}, false
}

// headMethod reads the method of a message from the first bytes of its
// line: the members before the cut must be whole. A message whose method
// comes after its long part is taken for a response.
func headMethod(head []byte) string {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		if key, _ := t.(string); key == "method" {
			var method string
			_ = json.Unmarshal(v, &method)
			return method
		}
	}
	return ""
}

// mib writes a size in whole MiB, or in bytes when that would not tell it
// from the limit (a line of 10 MiB and a few bytes).
func mib(n int) string {
	if n%(1<<20) == 0 || n >= maxLine+1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
