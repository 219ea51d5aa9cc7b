package protocol

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
)

// Virtual is a connection without a transport of its own. A node of mm's
// cluster serves on its hub the sessions its grains hold for a client
// whose connection is on another node (package grains): the requests of
// that client come decoded, in the order the other node read them, and
// everything the connection writes — updates, answers, mm's own requests —
// goes to Out as whole lines, as it would go to stdout. Ownership, roots,
// takeovers and answers are those of any connection on the hub. It has no
// reader: nothing here parses a request's JSON again.
//
// Concurrency: every method may be called from any goroutine; Serve,
// Cancel, CancelRequest and Reopen are served one at a time, in the order
// they are called (each grain calls them in its session's order).
type Virtual struct {
	a      *Agent
	cancel context.CancelFunc // the connection's context: its store reads
	mu     sync.Mutex         // serves one call at a time, as the ingress would
}

// VirtualOptions wires a Virtual.
type VirtualOptions struct {
	// Out receives the connection's lines; each Write is whole lines, one
	// Write at a time. It may block: the connection's ordered writer waits
	// for it (the client is slow), and its sessions' streams with it.
	Out io.Writer
	Log *slog.Logger
	// Owner and Roots are the client's, as ConnOptions says.
	Owner string
	Roots []string
	// CallPrefix starts the ids of mm's own requests to the client ("mm-"
	// by default): a client connected to one node has virtual connections
	// on several, whose ids must not meet.
	CallPrefix string
	// Node names this node in the error of a cwd it cannot see.
	Node string
}

// Virtual opens a virtual connection on the hub.
func (h *Hub) Virtual(o VirtualOptions) *Virtual {
	log := o.Log
	if log == nil {
		log = h.log
	}
	// One writer, as for a connection with a transport: the outbox's
	// shards and the ingress's errors each go out whole, one at a time.
	out := &lockedWriter{w: o.Out}
	box := newOutbox(out, log)
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{hub: h, cfg: h.cfg, box: box, log: log, ctx: ctx, owner: o.Owner, roots: o.Roots, shared: true, node: o.Node,
		cwds: map[string]bool{}, creators: make(chan struct{}, maxCreating)}
	if o.CallPrefix != "" {
		a.calls.prefix = o.CallPrefix
	}
	box.encode, box.answered = a.encode, a.prompts.answered
	go func() { box.setRoot(h.started().Root()) }()
	return &Virtual{a: a, cancel: cancel}
}

// Serve serves one decoded request of the client: p is its params as the
// SDK's type (what the method table's decode makes of them at the
// client's node), checked again here as the SDK checks them; sid is the
// id the client's node chose for a session/new or session/fork. Only a
// session's requests come here: the client's node serves the
// connection's.
func (v *Virtual) Serve(method string, id json.RawMessage, p any, sid string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	a := v.a
	r := a.request(id, method)
	defer a.survive(method, r)
	m, ok := methods[method]
	if !ok || m.run == nil {
		a.answer("", r, nil, acp.NewMethodNotFound(method))
		return
	}
	if rerr := m.check(p); rerr != nil {
		a.answer("", r, nil, rerr)
		return
	}
	m.run(a, r, p, sid)
}

// Refuse answers a request whose params could not be taken from the
// other node's message: invalid params, saying why.
func (v *Virtual) Refuse(method string, id json.RawMessage, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.a.request(id, method)
	v.a.answer("", r, nil, acp.NewInvalidParams(map[string]any{"error": err.Error()}))
}

// Cancel serves the client's session/cancel of session sid.
func (v *Virtual) Cancel(sid string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	_ = v.a.Cancel(v.a.ctx, acp.CancelNotification{SessionId: acp.SessionId(sid)})
}

// CancelRequest serves the client's $/cancel_request of one of its
// prompts here.
func (v *Virtual) CancelRequest(id json.RawMessage) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.a.prompts.cancel(id)
}

// Answered takes the client's answer to one of mm's requests of this
// connection; it reports false for another's.
func (v *Virtual) Answered(id, result, rerr json.RawMessage) bool {
	return v.a.calls.answered(id, result, rerr)
}

// Close ends the connection: the client is gone. Its sessions' turns end
// cancelled and the sessions are left detached, live and loadable.
func (v *Virtual) Close() {
	a := v.a
	a.markClosed() // at once: nothing waits for answers here
	a.stopTaking()
	a.letGo(v.cancel)
	a.box.closeWithin(time.Second)
}

// Reopen makes session sid live here again, quietly, before the client's
// next request of it, when it is not live on this hub: the session was on
// a node of the cluster that was lost or left, and its history is in the
// store. p is a session/resume of it. It reports whether
// it reopened; a session that cannot be (another owner's, not stored)
// is left to the request that follows, which says why.
func (v *Virtual) Reopen(sid string, p acp.ResumeSessionRequest) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	a := v.a
	if a.live(sid) != nil || a.hub.sessions.Holds(sid) {
		return false
	}
	if methods[acp.AgentMethodSessionResume].check(p) != nil || string(p.SessionId) != sid {
		return false
	}
	// Its answer is nobody's: the client did not ask, and the outbox does
	// not expect it.
	r := actors.NewReply(nil, acp.AgentMethodSessionResume)
	defer a.survive(r.Method, r)
	a.serveResume(r, p)
	return true
}

// Owner is the client this virtual connection serves.
func (v *Virtual) Owner() string { return v.a.owner }
