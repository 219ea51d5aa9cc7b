package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// A session opened from its store (a load or a resume) owns its opening:
// its actor starts at once, reads its state off the actor, and keeps what
// it is sent meanwhile, so the mailbox is the session's order from its
// first request on.

// OpenSession starts the actor of a session whose state is still to be
// read (a load or a resume of a stored session): the actor starts opening
// and, off its goroutine, once after is closed (nil: at once), takes its
// state from open. It keeps every message sent to it meanwhile and serves
// them once open, so the session's requests are served in the order they
// were sent, the opening first. open returns the state; or nil and what
// every request sent to the session is answered (the opening request it
// answers itself), and the session stops.
// out is the outbox it answers through until open (nil: the runtime's).
func (rt *Runtime) OpenSession(id, cwd string, out Outbox, after <-chan struct{}, open func(*Session) (*SessionState, any)) *Session {
	if out == nil {
		out = rt.out
	}
	h := &Session{ID: id, Cwd: cwd, rt: rt, final: make(chan struct{}), gone: make(chan struct{}), out: out}
	o := &opener{h: h, after: after, open: open}
	h.pid = rt.place(id, o)
	return h
}

// opener is a session's actor while it opens, and the session once open.
type opener struct {
	h     *Session
	after <-chan struct{}
	open  func(*Session) (*SessionState, any)
	// kept are the edge's messages that came while the session opened.
	kept []any
	s    *session
	// ended is set once final is closed for a session that never opened.
	ended bool
}

// opened brings an opening session its state: s built from it, or why
// there is none.
type opened struct {
	s      *session
	failed any
}

func (o *opener) Receive(ctx actor.Context) {
	if o.s != nil {
		o.s.Receive(ctx)
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		o.started(ctx)
	case *opened:
		if m.s == nil {
			o.h.fail(m.failed)
			o.end()
			ctx.Stop(ctx.Self())
			return
		}
		o.s = m.s
		o.s.handle = o.h
		o.s.start(ctx)
		if len(o.kept) > 0 {
			// Served in order, behind anything still to come.
			o.s.stash, o.kept = o.kept, nil
			o.s.unstashing = true
			ctx.Send(ctx.Self(), &unstash{})
		}
	case *actor.Stopped:
		o.end()
		o.h.stopped1()
	default:
		if fromEdge(m) {
			o.kept = keep(o.kept, m)
		}
	}
}

// started starts the opening. Waiting for the work before and reading the
// store are disk or database work: off the actor, as all blocking work is.
func (o *opener) started(ctx actor.Context) {
	h, self, root := o.h, ctx.Self(), ctx.ActorSystem().Root
	h.rt.goWork(func() {
		if o.after != nil {
			<-o.after
		}
		root.Send(self, o.load())
	})
}

// end makes the file final for a session that never opened.
func (o *opener) end() {
	if !o.ended {
		o.ended = true
		close(o.h.final)
	}
}

// load runs open and builds the session (which reads its skills from the
// disk); a panic fails the opening.
func (o *opener) load() (m *opened) {
	defer func() {
		if r := recover(); r != nil {
			o.h.rt.log.Error(fmt.Sprintf("[acp] session %s: internal error opening it: %v", o.h.ID, r))
			m = &opened{failed: &Outcome{Err: fmt.Sprintf("mm failed: %v", r)}}
		}
	}()
	st, failed := o.open(o.h)
	if st == nil {
		if failed == nil {
			failed = closedOutcome
		}
		return &opened{failed: failed}
	}
	st.ID, st.Cwd = o.h.ID, o.h.Cwd
	return &opened{s: newSession(o.h.rt, st, o.h.final)}
}

// fail records that the session could not open: what it was sent, and is
// sent from now on, is answered with failed.
func (s *Session) fail(failed any) {
	s.mu.Lock()
	s.failed = failed
	s.mu.Unlock()
}

// neverOpened reports whether the session's opening failed (OpenSession).
func (s *Session) neverOpened() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed != nil
}

// closedAnswer is what a request sent to the stopped session is
// answered: closed, or what its failed opening said. s.mu is held.
func (s *Session) closedAnswer(closed any) any {
	if s.failed != nil {
		return s.failed
	}
	return closed
}
