package actors

import (
	"sync"

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

// Grain is a session's actor as a cluster activated it (NewGrain).
type Grain interface {
	actor.Actor
	// Bound says whether the grain has been given its session.
	Bound() bool
}

// NewGrain makes the actor of session id that a cluster activated as self,
// and lets the runtime give it the session (SpawnSession, OpenSession). It
// is to be called from the activation's Receive, at actor.Started; the
// Grain's Receive then takes every message of the actor's.
func (rt *Runtime) NewGrain(id string, self *actor.PID) Grain {
	rt.grains.put(id, self)
	return &session{rt: rt, id: id, opening: true}
}

// Bound says whether the grain has been given its session (its handle).
func (s *session) Bound() bool { return s.handle != nil }

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
