package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// What is done with a session that is not live — a close's answer once
// its file is final, a delete, a fork's read of its stored file, a load —
// is done by an actor of its own, behind the actor of the work on the
// same id before it: it watches that actor (protoactor's Watch), and
// starts once it is told it is gone (Terminated), in its own mailbox. A
// session that ends itself is gone only once its file is final
// (stopPersistence), and a work's actor once its work is done, so what
// comes next finds the file as what came before left it. Nothing waits
// outside a mailbox: the edge keeps, by id, the latest of these actors
// (registry.Table.Behind), and each asks the actor system about the one
// before it.

// workDone tells a work's actor (Behind) that its work ran: it stops.
type workDone struct{}

// behind is a work's actor: it runs work, off itself, once the actor
// before it is gone, then stops.
type behind struct {
	rt     *Runtime
	handle *Session
	before *actor.PID
	work   func()
}

// Behind spawns the actor of work on session id, which runs once the
// actor of before (nil: none) is gone, and stops once work has run. Its
// handle is what the next work on the id waits for.
func (rt *Runtime) Behind(id string, before *Session, work func()) *Session {
	h := &Session{ID: id, rt: rt, final: make(chan struct{}), gone: make(chan struct{})}
	close(h.final) // it writes no file
	h.ended = true // it is no live session
	b := &behind{rt: rt, handle: h, work: work}
	if before != nil {
		b.before = before.pid
	}
	h.pid = rt.sys.Root.Spawn(rt.props(func() actor.Actor { return b }))
	return h
}

func (b *behind) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if b.before == nil {
			b.run(ctx)
			return
		}
		ctx.Watch(b.before)
	case *actor.Terminated:
		if b.before != nil && m.Who.Equal(b.before) {
			b.before = nil
			b.run(ctx)
		}
	case *workDone:
		ctx.Stop(ctx.Self())
	case *actor.Stopped:
		b.handle.stopped1()
	}
}

// run runs the work off the actor; a panic in it is logged, and the
// actor stops all the same.
func (b *behind) run(ctx actor.Context) {
	self, root, log, work, id := ctx.Self(), b.rt.sys.Root, b.rt.log, b.work, b.handle.ID
	b.work = nil
	b.rt.goWork(func() {
		defer root.Send(self, &workDone{})
		defer func() {
			if r := recover(); r != nil {
				log.Error(fmt.Sprintf("[acp] session %s: internal error in the work on it: %v", id, r))
			}
		}()
		work()
	})
}

// Gone says whether the session's actor is gone: the work on its id that
// comes next need not wait for it.
func (s *Session) Gone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}
