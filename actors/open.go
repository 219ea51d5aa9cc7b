package actors

import (
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// A session's actor is spawned at once, and opens itself: a session whose
// state is still to be read (a load or a resume), or whose actor a cluster
// activated before anyone knew what it is (grain.go), starts opening. It
// keeps what the edge sends it meanwhile (its stash, as while it moves),
// and takes its state as plain data (opened): the state, and what was
// read for it from the disk off the actor. Then it serves what it kept, in
// order, behind anything still to come: the mailbox is the session's order
// from its first request on.

// OpenSession starts the actor of a session whose state is still to be
// read (a load or a resume of a stored session): the actor starts
// opening, and once the actor of the work on the session before is gone
// (before, nil: none; behind.go), open gives the state, off the actor.
// The requests sent to the session meanwhile are served once it is open,
// in the order they were sent, the opening first. open returns the state;
// or nil and what every request sent to the session is answered (the
// opening request it answers itself), and the session stops. on is the
// connection it is on; here, when set, the actor serving a cluster's call
// (Here), which takes the session there and then if it is the session's
// grain.
func (rt *Runtime) OpenSession(id, cwd string, on Attachment, before *Session, open func(*Session) (*SessionState, any), here *Here) *Session {
	h := &Session{ID: id, Cwd: cwd, rt: rt, final: make(chan struct{}), gone: make(chan struct{})}
	o := opening{open: open}
	if before != nil {
		o.before = before.pid
	}
	rt.place(h, on, o, here)
	return h
}

// opening is how a session that opens gets its state: open, once the
// actor before it is gone; or ready, the state of a session made or
// forked (SpawnSession), handed to its grain with its handle (given) so
// that one message brings it both.
type opening struct {
	before *actor.PID
	open   func(*Session) (*SessionState, any)
	ready  *opened
}

// beginOpening starts the session's opening: at once, or once the actor
// before it is gone (Terminated). A session made or forked
// (SpawnSession) opens with the state it was given, at once.
func (s *session) beginOpening(ctx actor.Context) {
	switch {
	case s.opener.ready != nil:
		m := s.opener.ready
		s.opener = opening{}
		s.onOpened(ctx, m)
	case s.opener.open == nil:
	case s.opener.before != nil:
		ctx.Watch(s.opener.before)
	default:
		open, h, rt, self := s.opener.open, s.handle, s.rt, ctx.Self()
		s.opener = opening{}
		rt.goWork(func() { rt.sys.Root.Send(self, rt.load(h, open)) })
	}
}

// opened brings an opening session its state and what was read for it,
// or, with no State, what its requests are answered (its opening failed).
type opened struct {
	State  *SessionState
	Read   *reads
	Failed any
}

// given gives a grain (grain.go) the handle the edge reaches its session
// by and the connection it is on, numbered in the runtime's handoff: the
// grain is the session's actor from then on.
type given struct{ Handle uint64 }

// load runs open and reads what the session needs from the disk, on a
// copy filled from its state; a panic fails the opening.
func (rt *Runtime) load(h *Session, open func(*Session) (*SessionState, any)) (m *opened) {
	defer func() {
		if r := recover(); r != nil {
			rt.log.Error(fmt.Sprintf("[acp] session %s: internal error opening it: %v", h.ID, r))
			m = &opened{Failed: &Outcome{Err: fmt.Sprintf("mm failed: %v", r)}}
		}
	}()
	st, failed := open(h)
	if st == nil {
		if failed == nil {
			failed = closedOutcome
		}
		return &opened{Failed: failed}
	}
	st.ID, st.Cwd = h.ID, h.Cwd
	return &opened{State: st, Read: prepare(rt, st)}
}

// prepare reads what a session of state st needs from the disk (read),
// off its actor.
func prepare(rt *Runtime, st *SessionState) *reads {
	s := &session{rt: rt}
	s.fill(st)
	return s.read()
}

// whileOpening serves what an opening session is sent besides the edge's
// requests (which it keeps): its handle, its state, its stop.
func (s *session) whileOpening(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		s.beginOpening(ctx)
	case *actor.Terminated:
		if b := s.opener.before; b != nil && m.Who.Equal(b) {
			s.opener.before = nil
			s.beginOpening(ctx)
		}
	case *given:
		var on Attachment
		s.handle, on, s.opener = s.rt.handoff.take(m.Handle)
		s.final = s.handle.final
		s.out, s.client = s.rt.attachment(on)
		ctx.CancelReceiveTimeout() // a grain's wait for its session
		s.beginOpening(ctx)
	case *opened:
		s.onOpened(ctx, m)
	case *drain:
		if s.handle == nil {
			ctx.Stop(ctx.Self()) // a grain no request gave a session
			return
		}
		s.endItself(ctx)
	case *drained:
		s.stop(ctx)
	case *actor.Stopping:
		if s.handle != nil {
			// Nothing of it ran: its file is final at once.
			s.stopPersistence(nil)
		}
	case *actor.Stopped:
		if s.handle == nil {
			// A grain no request gave a session (the request for it
			// failed, or its node is leaving): nothing waits for it.
			s.rt.grains.drop(s.id, ctx.Self())
			return
		}
		s.handle.stopped1()
	}
}

// onOpened makes the session from its state, starts it, and serves what it
// kept meanwhile; or, when it has none, fails what it was sent and stops.
func (s *session) onOpened(ctx actor.Context, m *opened) {
	if m.State == nil {
		// What it kept is answered now, what is still on its way as it
		// comes, in the order sent (stop, leave).
		s.failed = m.Failed
		s.handle.fail(m.Failed)
		s.stop(ctx)
		return
	}
	s.fill(m.State)
	s.build(m.Read)
	s.opening = false
	s.start(ctx)
	if len(s.stash) > 0 {
		// Served in order, behind anything still to come.
		s.unstashing = true
		ctx.Send(ctx.Self(), &unstash{})
	}
}

// handoff holds the handles of sessions given to grains until each grain
// takes its own (given).
type handoff struct {
	mu   sync.Mutex
	last uint64
	m    map[uint64]handed
}

type handed struct {
	h  *Session
	on Attachment
	o  opening
}

func (t *handoff) put(h *Session, on Attachment, o opening) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]handed{}
	}
	t.last++
	t.m[t.last] = handed{h, on, o}
	return t.last
}

func (t *handoff) take(n uint64) (*Session, Attachment, opening) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.m[n]
	delete(t.m, n)
	return x.h, x.on, x.o
}

// fail records that the session could not open: what it is sent is
// answered with failed, by the session until it leaves (its end: leave),
// and by the handle after.
func (s *Session) fail(failed any) {
	s.mu.Lock()
	s.failed = failed
	s.mu.Unlock()
}

// leave ends the handle once its actor took every message it posted
// (received, the actor's count): from then on the handle refuses what it
// is sent itself, and the actor may stop. While one is still on its way
// it reports false: the actor refuses that one as it comes, in its order,
// then asks again. A request the handle refused itself is thus never
// answered ahead of one it sent before (TestFailedOpeningAnswersInOrder).
func (s *Session) leave(received uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent.Load() != received {
		return false
	}
	s.ended = true
	return true
}

// NeverOpened reports whether the session's opening failed (OpenSession).
func (s *Session) NeverOpened() bool {
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
