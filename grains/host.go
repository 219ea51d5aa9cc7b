package grains

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/protocol"
)

// SessionKind is the grain kind of mm's sessions; a grain's identity is
// its session's id.
const SessionKind = "session"

// Host serves this node's session grains on its hub. A session grain is
// the session's own actor: the cluster activates it with the runtime's
// grain props (actors.Runtime.GrainProps), and the first request for the
// session gives it its handle and state: a session/new its new state, a
// load, a resume or a fork theirs, and a prompt for a session whose node
// was lost its stored state first (reopen). The session's one Receive
// hands the typed calls of a client's node to the Host (actors.Calls),
// which serves them in its mailbox's order, through the client's link on
// this node (link.go): the client as the hub's session code knows it (a
// protocol.Caller), and the way back to the client's node.
type Host struct {
	hub *protocol.Hub
	// roots are the folders this node's sessions may be in (serve.roots):
	// its own, never a client's node's word.
	roots []string
	// owners are this node's tokens: a call is taken only with its
	// owner's proof (proof.go).
	owners  *Owners
	log     *slog.Logger
	refused *refusals
	// proved counts the calls whose proof was checked: every call but a
	// prompt sent straight within this process (localCall). For a test.
	proved atomic.Int64

	mu       sync.Mutex
	m        *Member
	links    map[string]*link     // by the client connection's key
	gone     map[string]time.Time // connections closed lately: their late calls are dropped
	draining bool
}

// NewHost makes the host of hub's sessions, whose cwds must be in roots
// (none: any), for the clients of owners' tokens; Kind goes to Start,
// then Watch with the Member Start returned. hub's runtime must run in
// the member's actor system (app.Options.System).
func NewHost(hub *protocol.Hub, roots []string, owners *Owners, log *slog.Logger) *Host {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{hub: hub, roots: roots, owners: owners, log: log, refused: &refusals{log: log},
		links: map[string]*link{}, gone: map[string]time.Time{}}
}

// Kind is the session kind for Options.Kinds: its actors are the
// sessions', spawned with the runtime's session props (its priority
// mailbox, its dispatcher). It waits for the hub's runtime.
func (h *Host) Kind() *cluster.Kind {
	return cluster.NewKind(SessionKind, h.hub.Runtime().GrainProps(h))
}

// Watch follows the membership: the links of a client whose node is lost
// are closed (their sessions stay live, detached, as when a client's
// transport closes).
func (h *Host) Watch(m *Member) {
	h.mu.Lock()
	h.m = m
	h.mu.Unlock()
	m.OnTopology(func(_, left []string) {
		if len(left) == 0 {
			return
		}
		h.mu.Lock()
		var lost []*link
		for key, l := range h.links {
			if slices.Contains(left, l.edge.Address) {
				lost = append(lost, l)
				delete(h.links, key)
				h.gone[key] = time.Now()
			}
		}
		h.mu.Unlock()
		for _, l := range lost {
			h.log.Info(fmt.Sprintf("cluster: the node of a client (%s) was lost; its sessions here stay, detached", l.edge.Address))
			go l.close()
		}
	})
}

// Drain stops taking new work: from now on a grain here sends back the
// requests that would start a turn or open a session (the client's node
// sends them again, to wherever the session goes once this node has
// left), and serves the rest (a cancel must reach its turn). It then
// waits until no session here runs a turn, or until ctx ends and the
// turns still running are cancelled.
func (h *Host) Drain(ctx context.Context) {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
	h.hub.Drain(ctx)
}

// Close closes every link here: their sessions' turns end cancelled, and
// what they owe their clients is answered.
func (h *Host) Close() {
	h.mu.Lock()
	ls := make([]*link, 0, len(h.links))
	for key, l := range h.links {
		ls = append(ls, l)
		h.gone[key] = time.Now()
	}
	clear(h.links)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(l.close)
	}
	wg.Wait()
}

func (h *Host) isDraining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining
}

// link returns the link here of call's client, made on its first call
// with key, the key of its connection (its proof checked); nil when that
// connection is gone, or when its link here has another owner (the
// client's node names each connection once: no owner's proof is made for
// another's connection).
func (h *Host) link(sys *actor.ActorSystem, call *grainspb.Call, key *secret) *link {
	ck := connKey(call.Conn)
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.links[ck]; l != nil {
		if l.owner != call.Owner {
			return nil
		}
		return l
	}
	if _, gone := h.gone[ck]; gone {
		return nil
	}
	for k, t := range h.gone {
		if time.Since(t) > time.Minute {
			delete(h.gone, k)
		}
	}
	l := h.newLink(sys, ck, key, call)
	h.links[ck] = l
	return l
}

// known returns the link here of the client connection c, if any.
func (h *Host) known(c *grainspb.Conn) *link {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.links[connKey(c)]
}

// forget drops a link whose client is gone.
func (h *Host) forget(l *link) {
	h.mu.Lock()
	if h.links[l.key] == l {
		delete(h.links, l.key)
		h.gone[l.key] = time.Now()
	}
	h.mu.Unlock()
}

func connKey(c *grainspb.Conn) string { return c.GetAddress() + "/" + c.GetId() }

func pidOf(c *grainspb.Conn) *actor.PID { return actor.NewPID(c.GetAddress(), c.GetId()) }

func nullable(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

// The Host serves what a session's clients on other nodes send its actor
// (actors.Calls): the session's actor is the grain, one Receive, and
// hands the cluster's messages here in its order.

var _ actors.Calls = (*Host)(nil)

// Identity is the session id of an actor the cluster activated.
func (h *Host) Identity(ctx actor.Context) string { return cluster.GetClusterIdentity(ctx).Identity }

// Takes says whether msg is the cluster's: a client's call or cancel, or
// the cluster's own word to a new activation.
func (h *Host) Takes(msg any) bool {
	switch msg.(type) {
	case *grainspb.Call, *localCall, *grainspb.Cancel, *cluster.ClusterInit:
		return true
	}
	return false
}

// Serve serves a client's call or cancel to session sid; state keeps its
// grain's record of the calls served.
func (h *Host) Serve(ctx actor.Context, sid string, state *any, msg any, here *actors.Here) {
	g, _ := (*state).(*grain)
	if g == nil {
		g = &grain{h: h, sid: sid, last: map[string]uint64{}}
		*state = g
	}
	switch m := msg.(type) {
	case *grainspb.Call:
		g.call(ctx, m, false, here)
	case *localCall:
		g.call(ctx, m.c, true, here)
	case *grainspb.Cancel:
		g.cancel(ctx, m, here)
	}
}

// grain is what the Host keeps of one session's actor: the calls of its
// clients' nodes it served.
type grain struct {
	h   *Host
	sid string
	// last is the seq of the last call served, by client connection: a
	// call sent again (the cluster's requests retry) is served once.
	last map[string]uint64
}

// opens and starts are the requests that open a session and those that
// start work, as the one method table says: a draining node sends both
// back.
func opens(m acpmethod.Method) bool  { return m.Opens }
func starts(m acpmethod.Method) bool { return m.Starts }

// call serves a call of a client's node; here is the session's actor
// serving it, which takes what the call sends the session there and then:
// one pass through the mailbox (actors.Here).
func (g *grain) call(ctx actor.Context, c *grainspb.Call, local bool, here *actors.Here) {
	node := ctx.ActorSystem().Address()
	respond := func(a *grainspb.Accepted) {
		a.Seq = c.Seq
		ctx.Respond(a)
	}
	// Nothing of a call is taken before its proof checks: its owner, its
	// connection, its session, its params. One from this process (a
	// localCall) has no proof to check.
	pk, why := g.check(c, local)
	if why != "" {
		// What the call says is quoted: it may come from anyone.
		g.h.refused.say(fmt.Sprintf("%q of session %q from %q: %s", c.Method, c.SessionId, c.Conn.GetAddress(), why))
		respond(&grainspb.Accepted{Node: node, Refused: fmt.Sprintf("mm node %s refused %q: %s", node, c.Method, why)})
		return
	}
	key := connKey(c.Conn)
	self := &grainspb.Conn{Address: ctx.Self().Address, Id: ctx.Self().Id}
	if g.h.m != nil {
		self.Stream = g.h.m.streamAddr() // where the edge sends its prompts straight
	}
	if c.Seq <= g.last[key] {
		a := &grainspb.Accepted{Node: node, Session: self}
		if l := g.h.known(c.Conn); l != nil {
			a.Link = l.me
		}
		respond(a)
		return
	}
	if g.h.isDraining() && (acpmethod.Is(c.Method, opens) || acpmethod.Is(c.Method, starts)) {
		respond(&grainspb.Accepted{Node: node, Again: true})
		return
	}
	g.last[key] = c.Seq
	l := g.h.link(ctx.ActorSystem(), c, pk)
	if l == nil {
		respond(&grainspb.Accepted{Node: node})
		return // the client is gone
	}
	l.forms.Store(c.Forms)
	l.caps.Store(c.Caps)
	if straight(ctx, c) {
		// Said with what the session writes, ahead of it.
		l.accepted(c.SessionId, c.Seq)
	} else {
		respond(&grainspb.Accepted{Node: node, Link: l.me, Session: self})
	}
	switch c.Method {
	case acp.AgentMethodSessionCancel:
		l.c.CancelSession(c.SessionId, here)
		return
	case acpmethod.CancelRequest:
		if id, ok := jsonrpc.IDOf(requestIDOf(c)); ok {
			l.c.CancelRequest(c.SessionId, id)
		}
		return
	}
	if (acpmethod.Is(c.Method, starts) || c.Method == acp.AgentMethodSessionClose) && l.c.Reopens(c.SessionId) {
		// The session was on a node that is gone: it comes back here,
		// from the store, before the request that needs it. A live
		// session's reopening is never read (its MCP servers are JSON to
		// decode: a few µs of every turn).
		if p, ok := reopenOf(c); ok && l.c.Reopen(c.SessionId, p, here) {
			g.h.log.Info(fmt.Sprintf("cluster: session %s reactivated on this node", c.SessionId))
		}
	}
	if len(c.Id) == 0 {
		return // a session's notification is a cancel
	}
	id, ok := jsonrpc.IDOf(c.Id)
	if !ok {
		g.h.refused.say(fmt.Sprintf("%q of session %q from %q: its id is neither a string nor a number", c.Method, c.SessionId, c.Conn.GetAddress()))
		return
	}
	p, err := decodeParams(c)
	if err != nil {
		l.c.Refuse(c.Method, id, err)
		return
	}
	l.c.Serve(c.Method, id, p, c.SessionId, here)
}

// straight says whether c was sent to the session's actor by the client's
// edge itself (a prompt to a session it knows), not by a request of
// the cluster's, which waits for Accepted: the edge learns that the
// session took it from the link's Outs (Out.accepted). The sender is the
// connection the proof covers.
func straight(ctx actor.Context, c *grainspb.Call) bool {
	s := ctx.Sender()
	return s != nil && c.Conn != nil && s.Address == c.Conn.Address && s.Id == c.Conn.Id
}

// check says why call is not to be taken ("" if it is), and returns the
// key of its connection: its owner must have a token here, its proof
// must check with that token (unless it was made in this process: local),
// and it must be for this grain's session. The key of a connection that
// has a link here is the link's.
func (g *grain) check(c *grainspb.Call, local bool) (key *secret, why string) {
	l := g.h.known(c.Conn)
	if l != nil && l.owner == c.Owner {
		key = l.k
	} else {
		key = g.h.owners.key(c.Owner, c.Conn)
	}
	if !local {
		g.h.proved.Add(1)
	}
	switch {
	case key == nil:
		return nil, fmt.Sprintf("no token of this node's names the owner %q (the nodes of a cluster share serve.tokens)", c.Owner)
	case !local && !key.checks(nil, c):
		return nil, fmt.Sprintf("the proof of the owner %q does not check: the call was not made with %q's token (a member without that token, or nodes whose serve.tokens differ)", c.Owner, c.Owner)
	case c.SessionId != g.sid:
		return nil, fmt.Sprintf("it is for session %q, and this is session %s's actor", c.SessionId, g.sid)
	case l != nil && l.owner != c.Owner:
		return nil, fmt.Sprintf("its connection is the owner %q's, not %q's", l.owner, c.Owner)
	}
	return key, ""
}

// cancel serves a cancel sent straight to the session's actor, ahead of
// its mailbox (grainspb.Cancel): every call before it was accepted here.
func (g *grain) cancel(ctx actor.Context, m *grainspb.Cancel, here *actors.Here) {
	l := g.h.known(m.Conn)
	if l == nil {
		return // the client is gone: its turns were cancelled then
	}
	if m.SessionId != g.sid || !l.k.checks(ctx.Self(), m) {
		g.h.refused.say(fmt.Sprintf("a cancel of session %q from %q: its proof does not check (made without the key of the connection it names)", m.SessionId, m.Conn.GetAddress()))
		return
	}
	if len(m.RequestId) > 0 {
		if id, ok := jsonrpc.IDOf(m.RequestId); ok {
			l.c.CancelRequest(m.SessionId, id)
		}
		return
	}
	l.c.CancelSession(m.SessionId, here)
}
