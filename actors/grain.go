package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// A session's actor may be spawned by a cluster rather than by the
// runtime: on a node of mm's cluster (package grains) a session is a grain
// whose identity is its id, and the cluster activates it — spawns its
// actor, with SessionProps — when the first request for it arrives, before
// anyone knows what the session is. The actor starts as a Grain that waits
// for its session; the request that makes or opens the session then calls
// SpawnSession or OpenSession as anywhere else, and the runtime gives the
// session (or its opener) to the Grain waiting for that id instead of
// spawning an actor: from then on the Grain is the session's actor, its
// mailbox the session's order. One actor, one mailbox, whoever spawned it.

// Grain is a session's actor activated by a cluster. Its Receive is the
// session's once the session is given to it; until then it waits, and
// what it is sent is dropped (nothing that names the session can reach it
// before: the handle that sends to it is made by the giving).
type Grain struct {
	rt   *Runtime
	id   string
	self *actor.PID
	// inner is the session's actor once given: the session, or its opener.
	inner actor.Actor
}

// NewGrain makes the actor of session id that a cluster activated as self,
// and lets the runtime give it the session (SpawnSession, OpenSession). It
// is to be called from the activation's Receive, at actor.Started; its
// Receive then takes every message of the actor's.
func (rt *Runtime) NewGrain(id string, self *actor.PID) *Grain {
	g := &Grain{rt: rt, id: id, self: self}
	rt.grains.put(g)
	return g
}

// SessionProps are the props a cluster spawns session actors with: those of
// a session the runtime spawns itself (its priority mailbox, for cancels;
// its children stopped when they fail; the runtime's dispatcher).
func (rt *Runtime) SessionProps(producer actor.Producer) *actor.Props {
	return rt.props(producer, actor.WithMailbox(actor.UnboundedPriorityMpsc()), actor.WithSupervisor(stopChildren))
}

// Bound says whether the grain has been given its session.
func (g *Grain) Bound() bool { return g.inner != nil }

// bind gives a waiting grain its session's actor: a session, or the opener
// of one. It is the runtime's own message to the grain, and never crosses
// nodes (as opened does not).
type bind struct{ inner actor.Actor }

// starter is a session's actor that starts when it is given to a grain as
// it would at its spawn.
type starter interface {
	actor.Actor
	started(ctx actor.Context)
}

func (g *Grain) Receive(ctx actor.Context) {
	if g.inner != nil {
		g.inner.Receive(ctx)
		return
	}
	switch m := ctx.Message().(type) {
	case *bind:
		g.inner = m.inner
		m.inner.(starter).started(ctx)
	case *actor.Stopped:
		// It stopped before it had a session (the request for it failed,
		// or its node is leaving): nothing waits for it any more.
		g.rt.grains.drop(g)
	}
}

// take returns the grain waiting for session id, and lets go of it: the
// caller gives it its session.
func (rt *Runtime) takeGrain(id string) *Grain { return rt.grains.take(id) }

// grainTable holds the grains waiting for their session.
type grainTable struct {
	mu sync.Mutex
	m  map[string]*Grain
}

func (t *grainTable) put(g *Grain) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*Grain{}
	}
	t.m[g.id] = g
}

func (t *grainTable) take(id string) *Grain {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.m[id]
	delete(t.m, id)
	return g
}

func (t *grainTable) drop(g *Grain) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[g.id] == g {
		delete(t.m, g.id)
	}
}
