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
// that client come as calls, in the order the other node read them, and
// everything the connection writes — updates, answers, mm's own requests —
// goes to Out as whole lines, as it would go to stdout. Ownership, roots,
// takeovers and answers are those of any connection on the hub.
//
// Concurrency: every method may be called from any goroutine; Call and
// Reopen are served one at a time, in the order they are called (each
// grain calls them in its session's order).
type Virtual struct {
	a      *Agent
	in     *ingress
	cancel context.CancelFunc // the connection's context: its store reads
	mu     sync.Mutex         // serves one Call or Reopen at a time, as the ingress would
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
	in := &ingress{agent: a, out: out, log: log, prompts: map[string]*promptRef{}}
	box.encode, box.answered = a.encode, in.answered
	go func() { box.setRoot(h.started().Root()) }()
	return &Virtual{a: a, in: in, cancel: cancel}
}

// Call serves one request (id set) or notification (id nil) of the client,
// as the ingress serves what it reads; sessionID is the id the client's
// node chose for a session/new.
func (v *Virtual) Call(method string, id, params json.RawMessage, sessionID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if id == nil {
		v.in.notification(method, params)
		return
	}
	a := v.a
	switch {
	case method == acp.AgentMethodSessionNew && sessionID != "":
		r := a.request(id, method)
		defer a.survive(method, r)
		ordered(func(a *Agent, r actors.Reply, p acp.NewSessionRequest) { a.serveNewAs(r, p, sessionID) })(v.in, r, params)
		return
	case method == acp.AgentMethodSessionFork && sessionID != "":
		r := a.request(id, method)
		defer a.survive(method, r)
		ordered(func(a *Agent, r actors.Reply, p acp.UnstableForkSessionRequest) { a.serveForkAs(r, p, sessionID) })(v.in, r, params)
		return
	}
	// Only a session's requests come here: the client's node serves the
	// connection's.
	if m, ok := methods[method]; ok && (m.session || m.creates) {
		v.in.serve(method, id, params)
		return
	}
	r := v.a.request(id, method)
	v.a.answer("", r, nil, acp.NewMethodNotFound(method))
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
// store. open is the params of a session/resume of it. It reports whether
// it reopened; a session that cannot be (another owner's, not stored)
// is left to the request that follows, which says why.
func (v *Virtual) Reopen(sid string, open json.RawMessage) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	a := v.a
	if len(open) == 0 || a.live(sid) != nil {
		return false
	}
	if a.hub.sessions.Holds(sid) {
		return false
	}
	var p acp.ResumeSessionRequest
	if decodeParams(open, &p) != nil || string(p.SessionId) != sid {
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
