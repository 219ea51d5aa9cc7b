package grains

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/protocol"
)

// SessionKind is the grain kind of mm's sessions; a grain's identity is
// its session's id.
const SessionKind = "session"

// Host serves this node's session grains on its hub. A grain holds no
// session state of its own: the session is the hub's actor, as in one
// process. The grain is where the cluster places the session — the one
// node that serves its requests — and it serves each request once, in
// the order its client's node sent them, through a virtual connection
// per client connection (protocol.Virtual) whose lines go back to that
// client's node.
type Host struct {
	hub *protocol.Hub
	log *slog.Logger

	mu       sync.Mutex
	m        *Member
	conns    map[string]*virtual  // by the client connection's key
	gone     map[string]time.Time // connections closed lately: their late calls are dropped
	draining bool
}

// NewHost makes the host of hub's sessions; Kind goes to Start, then
// Watch with the Member Start returned.
func NewHost(hub *protocol.Hub, log *slog.Logger) *Host {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{hub: hub, log: log, conns: map[string]*virtual{}, gone: map[string]time.Time{}}
}

// Kind is the session kind for Options.Kinds.
func (h *Host) Kind() *cluster.Kind {
	return cluster.NewKind(SessionKind, actor.PropsFromProducer(func() actor.Actor { return &grain{h: h, last: map[string]uint64{}} }))
}

// Watch follows the membership: the virtual connections of a client
// whose node is lost are closed (their sessions stay live, detached, as
// when a client's transport closes).
func (h *Host) Watch(m *Member) {
	h.mu.Lock()
	h.m = m
	h.mu.Unlock()
	m.OnTopology(func(_, left []string) {
		if len(left) == 0 {
			return
		}
		h.mu.Lock()
		var lost []*virtual
		for key, v := range h.conns {
			if slices.Contains(left, v.edge.Address) {
				lost = append(lost, v)
				delete(h.conns, key)
				h.gone[key] = time.Now()
			}
		}
		h.mu.Unlock()
		for _, v := range lost {
			h.log.Info(fmt.Sprintf("cluster: the node of a client (%s) was lost; its sessions here stay, detached", v.edge.Address))
			go v.close()
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

// Close closes every virtual connection here: their sessions' turns end
// cancelled, and what they owe their clients is answered.
func (h *Host) Close() {
	h.mu.Lock()
	vs := make([]*virtual, 0, len(h.conns))
	for key, v := range h.conns {
		vs = append(vs, v)
		h.gone[key] = time.Now()
	}
	clear(h.conns)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(v.close)
	}
	wg.Wait()
}

func (h *Host) isDraining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining
}

// virtual returns the virtual connection here of call's client, opening
// it on its first call; nil when that connection is gone.
func (h *Host) virtual(sys *actor.ActorSystem, call *grainspb.Call) *virtual {
	key := connKey(call.Conn)
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.conns[key]; v != nil {
		return v
	}
	if _, gone := h.gone[key]; gone {
		return nil
	}
	for k, t := range h.gone {
		if time.Since(t) > time.Minute {
			delete(h.gone, k)
		}
	}
	tag := make([]byte, 4)
	_, _ = rand.Read(tag)
	v := &virtual{h: h, key: key, edge: actor.NewPID(call.Conn.Address, call.Conn.Id), sys: sys}
	v.self = sys.Root.Spawn(actor.PropsFromFunc(v.receive))
	v.out = &linesWriter{sys: sys, edge: v.edge, from: &grainspb.Conn{Address: v.self.Address, Id: v.self.Id}, node: sys.Address(), alive: h.alive}
	v.v = h.hub.Virtual(protocol.VirtualOptions{
		Out: v.out, Log: h.log, Owner: call.Owner, Roots: call.Roots,
		CallPrefix: "mm-" + hex.EncodeToString(tag) + "-", Node: sys.Address(),
	})
	h.conns[key] = v
	return v
}

// alive says whether the node at address is a member (true before the
// membership is known).
func (h *Host) alive(address string) bool {
	h.mu.Lock()
	m := h.m
	h.mu.Unlock()
	return m == nil || m.isMember(address)
}

// forget drops a virtual connection whose client is gone.
func (h *Host) forget(v *virtual) {
	h.mu.Lock()
	if h.conns[v.key] == v {
		delete(h.conns, v.key)
		h.gone[v.key] = time.Now()
	}
	h.mu.Unlock()
}

func connKey(c *grainspb.Conn) string { return c.GetAddress() + "/" + c.GetId() }

// virtual is a client connection's virtual connection on this node, and
// the actor its node sends the client's answers and its end to.
type virtual struct {
	h    *Host
	key  string
	edge *actor.PID // the client's edge actor
	sys  *actor.ActorSystem
	self *actor.PID
	out  *linesWriter
	v    *protocol.Virtual
	once sync.Once
}

func (v *virtual) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *grainspb.Answer:
		v.v.Answered(m.Id, nullable(m.Result), nullable(m.Error))
	case *grainspb.Gone:
		v.h.forget(v)
		go v.close()
	}
}

// close ends the virtual connection: its sessions' turns end cancelled,
// they stay live and detached, and its lines are written or dropped.
func (v *virtual) close() {
	v.once.Do(func() {
		v.v.Close()
		v.sys.Root.Stop(v.self)
	})
}

func nullable(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

// grainIdle is how long a grain without a call stays active. Its only
// state is the seq of the last call served, which matters for the retries
// of the cluster's requests (seconds): a grain that stopped comes back on
// the next call, and its session, live on the hub or in the store, with
// it.
const grainIdle = 10 * time.Minute

// grain is one session's place in the cluster.
type grain struct {
	h   *Host
	sid string
	// last is the seq of the last call served, by client connection: a
	// call sent again (the cluster's requests retry) is served once.
	last map[string]uint64
}

func (g *grain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *cluster.ClusterInit:
		g.sid = m.Identity.Identity
		ctx.SetReceiveTimeout(grainIdle)
	case *actor.ReceiveTimeout:
		// The session stays live on the hub; only its place in the
		// cluster goes, to come back on its next request.
		ctx.Stop(ctx.Self())
	case *grainspb.Call:
		g.call(ctx, m)
	}
}

// opens are the requests that open a session; starts, those that start
// work. A draining node sends both back.
var (
	opens  = []string{acp.AgentMethodSessionNew, acp.AgentMethodSessionLoad, acp.AgentMethodSessionResume, acp.AgentMethodSessionFork}
	starts = []string{acp.AgentMethodSessionPrompt, acp.AgentMethodSessionSetMode, acp.AgentMethodSessionSetConfigOption}
)

func (g *grain) call(ctx actor.Context, c *grainspb.Call) {
	key := connKey(c.Conn)
	node := ctx.ActorSystem().Address()
	if c.Seq <= g.last[key] {
		ctx.Respond(&grainspb.Accepted{Node: node})
		return
	}
	if g.h.isDraining() && (slices.Contains(opens, c.Method) || slices.Contains(starts, c.Method)) {
		ctx.Respond(&grainspb.Accepted{Node: node, Again: true})
		return
	}
	g.last[key] = c.Seq
	v := g.h.virtual(ctx.ActorSystem(), c)
	if v == nil {
		ctx.Respond(&grainspb.Accepted{Node: node})
		return // the client is gone
	}
	ctx.Respond(&grainspb.Accepted{Node: node, Virtual: &grainspb.Conn{Address: v.self.Address, Id: v.self.Id}})
	switch c.Method {
	case acp.AgentMethodSessionCancel:
		v.v.Cancel(c.SessionId)
		return
	case "$/cancel_request":
		v.v.CancelRequest(c.GetRequestId())
		return
	}
	if slices.Contains(starts, c.Method) || c.Method == acp.AgentMethodSessionClose {
		// The session was on a node that is gone: it comes back here,
		// from the store, before the request that needs it.
		if p, ok := reopenOf(c); ok && v.v.Reopen(c.SessionId, p) {
			g.h.log.Info(fmt.Sprintf("cluster: session %s reactivated on this node", c.SessionId))
		}
	}
	id := nullable(c.Id)
	if id == nil {
		return // a session's notification is a cancel
	}
	p, err := decodeParams(c)
	if err != nil {
		v.v.Refuse(c.Method, id, err)
		return
	}
	v.v.Serve(c.Method, id, p, c.SessionId)
}

// errEdgeGone ends a virtual connection's writes: its client's node is
// lost, or the client's connection closed.
var errEdgeGone = errors.New("the client's node is gone")

// linesWriter sends a virtual connection's lines to its client's edge
// actor and waits until they are written there: the client's pace is its
// sessions' pace, wherever they run. The virtual connection makes one
// Write at a time (protocol.VirtualOptions.Out), so the seqs go in order:
// the edge writes each seq once.
type linesWriter struct {
	sys   *actor.ActorSystem
	edge  *actor.PID
	from  *grainspb.Conn
	node  string
	alive func(address string) bool
	seq   uint64
}

// resend is how long an unanswered Lines waits before it goes again: the
// edge answers once it has written them, and a slow client is not a lost
// one.
const resend = 5 * time.Second

func (w *linesWriter) Write(b []byte) (int, error) {
	w.seq++
	msg := &grainspb.Lines{From: w.from, Node: w.node, Seq: w.seq, Data: slices.Clone(b)}
	for {
		res, err := w.sys.Root.RequestFuture(w.edge, msg, resend).Result()
		if r, ok := res.(*grainspb.Written); ok && r.Seq == w.seq {
			return len(b), nil
		}
		if errors.Is(err, actor.ErrDeadLetter) || errors.Is(err, remote.ErrDeadLetter) || !w.alive(w.edge.Address) {
			return 0, errEdgeGone
		}
	}
}
