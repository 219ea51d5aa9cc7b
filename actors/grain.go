package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A session's actor may be spawned by a cluster rather than by the
// runtime: on a node of mm's cluster (package grains) a session is a grain
// whose identity is its id, and the cluster activates it — spawns its
// actor, with SessionProps — when the first request for it arrives, before
// anyone knows what the session is. That actor is a session that opens
// (open.go) and has no handle yet; the request that makes or opens the
// session then calls SpawnSession or OpenSession as anywhere else, and the
// runtime, instead of spawning an actor, gives the grain waiting for that
// id its handle (given) and its state (opened), both plain data. One
// actor, one mailbox, whoever spawned it.

// Calls serves what a cluster sends a session's actor besides the
// session's own messages (its clients' calls from other nodes: package
// grains), in the session's order: the actor is the session's, one
// Receive, and it hands them on.
type Calls interface {
	// Identity is the session id of an actor the cluster activated.
	Identity(ctx actor.Context) string
	// Takes says whether msg is the cluster's, for Serve.
	Takes(msg any) bool
	// Serve serves msg for session sid; state is the session's slot for
	// what Serve keeps of it; here is the session's actor, for what Serve
	// has it take there and then (Here).
	Serve(ctx actor.Context, sid string, state *any, msg any, here *Here)
}

// Here is a session's actor while it serves a cluster's call of it: what
// the call sends the session through its handle (Session.Start, Cancel,
// SetMode, End, RequestState, …; OpenSession's given) is taken there and
// then, as if it had come in the call's place, rather than sent through
// the same mailbox a second time. It is only ever
// handed down the call's own goroutine, and used while the call is
// served.
type Here struct {
	pid  *actor.PID
	take func(msg any)
	// received is the actor's count of the messages its handle sent it
	// that it took (Session.sent).
	received *uint64
}

// behind says whether a message the handle h sent through the mailbox is
// still on its way: what here would take must come behind it. It is read
// on the actor's goroutine, as the call is served.
func (here *Here) behind(h *Session) bool { return h.sent.Load() != *here.received }

// of says whether here is the actor of the session whose handle is h: a
// session opened again elsewhere since (a load of it on this node is an
// actor of its own) is sent its messages.
func (here *Here) of(h *Session) bool {
	return here != nil && h.pid != nil && here.pid.Equal(h.pid)
}

// grainIdle is how long a grain that no request gave a session stays: its
// request failed (an unknown session, a cwd outside the roots), and no
// other has come.
const grainIdle = time.Minute

// GrainProps are the props a cluster spawns a session's actor with: a
// session that opens, waiting to be given its handle and state (given,
// opened) by the request that makes or opens it, calls serving what the
// cluster sends it besides.
func (rt *Runtime) GrainProps(calls Calls) *actor.Props {
	return rt.SessionProps(func() actor.Actor { return &session{rt: rt, opening: true, calls: calls} })
}

// clusters serves what a session's actor the cluster activated is sent by
// the cluster, and says whether msg was that.
func (s *session) clusters(ctx actor.Context, msg any) bool {
	switch msg.(type) {
	case *actor.Started:
		if s.handle != nil || s.id != "" {
			return false
		}
		s.id = s.calls.Identity(ctx)
		s.rt.grains.put(s.id, ctx.Self())
		ctx.SetReceiveTimeout(grainIdle)
		return true
	case *actor.ReceiveTimeout:
		if s.handle == nil {
			ctx.Stop(ctx.Self())
		}
		return true
	}
	if !s.calls.Takes(msg) {
		return false
	}
	s.calls.Serve(ctx, s.id, &s.callState, msg, &Here{pid: ctx.Self(), take: func(m any) { s.take(ctx, m) }, received: &s.received})
	return true
}

// SessionProps are the props of a session's actor, the runtime's and a
// cluster's: its priority mailbox, for cancels; its children stopped when
// they fail; a PoisonPill taken as a drain (drain.go); the runtime's
// dispatcher.
func (rt *Runtime) SessionProps(producer actor.Producer) *actor.Props {
	return rt.props(producer, actor.WithMailbox(actor.UnboundedPriorityMpsc()), actor.WithSupervisor(stopChildren),
		actor.WithReceiverMiddleware(sessionMiddleware))
}

// grainTable holds the grains waiting for their session, by id.
type grainTable struct {
	mu sync.Mutex
	m  map[string]*actor.PID
}

func (t *grainTable) put(id string, pid *actor.PID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*actor.PID{}
	}
	t.m[id] = pid
}

// take returns the grain waiting for session id, and lets go of it: the
// caller gives it its session.
func (t *grainTable) take(id string) *actor.PID {
	t.mu.Lock()
	defer t.mu.Unlock()
	pid := t.m[id]
	delete(t.m, id)
	return pid
}

func (t *grainTable) drop(id string, pid *actor.PID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.m[id]; p != nil && p.Equal(pid) {
		delete(t.m, id)
	}
}
