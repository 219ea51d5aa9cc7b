package actors

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// maxWaiting bounds the prompts of one session that may wait unanswered:
// a client that sends more before the first ones end is refused, by the
// session as it takes each (onStartTurn).
const maxWaiting = 64

// tooManyPrompts is the refusal of a prompt beyond maxWaiting
// (TurnResult.Refused).
var tooManyPrompts = fmt.Sprintf("more than %d prompts of this session are waiting for their turn", maxWaiting)

// ErrSessionClosed answers the requests a session could not serve because
// it stopped first.
var ErrSessionClosed = errors.New("the session was closed")

// Session is the edge's handle on a session actor. Its methods are safe for
// concurrent use. Every method that reads or changes the session sends one
// message to the session's mailbox before it returns, so the session takes
// the requests in the order the methods are called: the edge calls them in
// the order it reads its client's messages. Requests that carry a Reply are
// answered through the Outbox, behind the updates they caused.
type Session struct {
	ID  string
	Cwd string
	pid *actor.PID
	rt  *Runtime
	// final is closed once the session's file is final: written and
	// closed after the actor stopped, or removed (session/delete), or at
	// once when sessions are not saved.
	final chan struct{}

	// started numbers the prompts handed to Start, so that a cancel,
	// which overtakes them in the mailbox, names those sent before it.
	started atomic.Uint64
	// sent counts the messages sent through the session's mailbox
	// (post); its actor counts those it took (session.received): while
	// one is on its way, a prompt its actor serves a call of is sent
	// behind it, not taken there and then (Here).
	sent atomic.Uint64
	// ended is set once the session's end is on its way (End, or the
	// session's own: drain.go): it took every request sent before, and
	// answers each; one sent after is refused (send), for its server to
	// answer. stopped is set once the actor is gone.
	mu      sync.Mutex
	ended   bool
	stopped bool
	// gone is closed once the actor stopped, so that the waits of the
	// calls it did not answer end (reply.go).
	gone chan struct{}
	// failed, once the session's opening failed (OpenSession), is what
	// every request sent to it is answered.
	failed any
}

// SpawnSession starts the actor of a session: a new one (only ID and Cwd
// set) or one loaded or forked from st. The system prompt is always the
// current one. On a node of a cluster the actor is the session's grain
// (grain.go).
func (rt *Runtime) SpawnSession(st *SessionState, on Attachment) *Session {
	final := make(chan struct{})
	h := &Session{ID: st.ID, Cwd: st.Cwd, rt: rt, final: final, gone: make(chan struct{})}
	if pid := rt.grains.take(st.ID); pid != nil {
		// A grain waits for it: it is given the state, as data, with
		// its handle, in one message.
		h.pid = pid
		rt.give(pid, h, on, opening{ready: &opened{State: st, Read: prepare(rt, st)}}, nil)
		return h
	}
	s := newSession(rt, st, on, final)
	// The actor holds its handle to mark it stopped when it stops by
	// itself (fenced) and its replies answered; it never reads pid, set
	// below.
	s.handle = h
	h.pid = rt.spawnSession(s)
	return h
}

// place gives the handle h of a session that opens (OpenSession) its
// actor: the grain a cluster activated for it, when one waits (grain.go),
// or one spawned here.
func (rt *Runtime) place(h *Session, on Attachment, o opening, here *Here) {
	if pid := rt.grains.take(h.ID); pid != nil {
		h.pid = pid // before the grain has it: its opening may start at once
		rt.give(pid, h, on, o, here)
		return
	}
	s := &session{rt: rt, id: h.ID, cwd: h.Cwd, opening: true, handle: h, final: h.final, opener: o}
	s.out, s.client = rt.attachment(on)
	h.pid = rt.spawnSession(s)
}

// give gives the grain pid the handle h, the connection it is on and how
// it opens (given): there and then when here is that grain, serving the
// call that opens it (Here).
func (rt *Runtime) give(pid *actor.PID, h *Session, on Attachment, o opening, here *Here) {
	g := &given{Handle: rt.handoff.put(h, on, o)}
	if here != nil && here.pid.Equal(pid) {
		here.take(g)
		return
	}
	rt.sys.Root.Send(pid, g)
}

// Attachment is the connection a session speaks through: where what it
// says goes, and whom its tools ask. A nil one is the runtime's
// (Options.Out, Options.Client).
type Attachment struct {
	Out    Outbox
	Client Client
}

// attachment is on with the runtime's connection where on names none.
func (rt *Runtime) attachment(on Attachment) (Outbox, Client) {
	if on.Out == nil {
		on.Out = rt.out
	}
	if on.Client == nil {
		on.Client = rt.client
	}
	return on.Out, on.Client
}

// spawnSession spawns a session's actor: cancels first in its mailbox,
// its children stopped when they fail.
func (rt *Runtime) spawnSession(a actor.Actor) *actor.PID {
	return rt.sys.Root.Spawn(rt.SessionProps(func() actor.Actor { return a }))
}

// stopChildren stops a failed child (a model or tool actor) instead of
// restarting it: its goroutine reports the failure itself, and a restart
// would run the call twice.
var stopChildren = actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
	return actor.StopDirective
})

// post sends the session msg through its mailbox, counted (sent): a
// message its actor takes there and then (Here) is not.
func (s *Session) post(msg any) {
	s.sent.Add(1)
	s.rt.sys.Root.Send(s.pid, msg)
}

// put hands msg to the session: to here, when here is its actor serving
// a call of it and nothing the handle posted is on its way (Here), else
// through its mailbox (post). s.mu is held; what here is to take is
// returned, for the caller to hand over once the lock is let go (the
// session may call its handle): nil when posted.
func (s *Session) put(msg any, here *Here) (take func()) {
	if !here.of(s) || here.behind(s) {
		s.post(msg)
		return nil
	}
	return func() { here.take(msg) }
}

// send sends msg, under the handle's lock so that the messages keep the
// order of the calls; here is as put's. When the session's end is on its
// way it sends nothing and returns what a request msg carries is to be
// answered (closed, or why the session's opening failed; nil for a
// message without one, closed nil): the session answers what it took,
// the request's server what never reached it. An endSession or a drain
// ends it.
func (s *Session) send(msg any, closed any, here *Here) (refused any) {
	s.mu.Lock()
	if s.stopped || s.ended {
		if closed != nil {
			refused = s.closedAnswer(closed)
		}
		s.mu.Unlock()
		return refused
	}
	switch msg.(type) {
	case *endSession, *drain:
		s.ended = true
	}
	take := s.put(msg, here)
	s.mu.Unlock()
	if take != nil {
		take()
	}
	return nil
}

// Ended says whether the session takes no request any more: its end is on
// its way (End, Stop, or its own), or its actor is gone. A table of live
// sessions takes an ended one for gone (registry.Session).
func (s *Session) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended || s.stopped
}

// end marks the session's end on its way: the session ends itself
// (drain.go), and answers what it was sent before.
func (s *Session) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// Start starts one prompt's turn without waiting for it and returns its
// number in the session. Its result, a *TurnResult, comes back through the
// Outbox's Answer, behind the turn's updates, exactly once — cancelled if
// the session stops before the turn has run, refused (TurnResult.Refused)
// when too many of the session's prompts wait already as it takes it.
// A session whose end is on its way takes none: Start returns what the
// prompt is to be answered (refused: cancelled, or why its opening
// failed), for its server to answer.
//
// here, when set, is the session's actor serving a cluster's call of it
// (Here): the turn is taken there and then, not sent through the mailbox
// a second time.
func (s *Session) Start(prompt []acp.ContentBlock, r Reply, here *Here) (seq uint64, refused any) {
	s.mu.Lock()
	if s.stopped || s.ended {
		refused = s.closedAnswer(&TurnResult{StopReason: acp.StopReasonCancelled})
		s.mu.Unlock()
		return 0, refused
	}
	seq = s.started.Add(1)
	take := s.put(&StartTurn{Seq: seq, Prompt: prompt, Reply: r, Asked: s.rt.watch.Ticket()}, here)
	s.mu.Unlock()
	if take != nil {
		take() // a message sent meanwhile comes behind it, as it would have
	}
	return seq, nil
}

// Cancel cancels the session's prompts started so far, running or queued;
// the prompts started after it are not affected.
//
// here is as Start's.
func (s *Session) Cancel(here *Here) {
	m := &CancelTurns{UpTo: s.started.Load()}
	if here.of(s) {
		here.take(m)
		return
	}
	s.post(m)
}

// CancelPrompt cancels prompt seq alone (its request was cancelled).
func (s *Session) CancelPrompt(seq uint64) {
	s.post(&CancelTurns{UpTo: seq, Only: true})
}

// CancelRequest cancels the prompt of request id alone, queued, running
// or still on its way (its $/cancel_request).
func (s *Session) CancelRequest(id jsonrpc.ID) {
	s.post(&CancelRequest{ID: id})
}

// Announce tells the session that the response carrying its id is queued:
// available_commands_update may follow it.
func (s *Session) Announce() {
	s.post(&Announce{})
}

// SetMode switches the session's mode ("ask" or "yolo"); the answer is an
// *Outcome.
func (s *Session) SetMode(mode string, r Reply, here *Here) (refused any) {
	return s.send(&SetMode{Mode: mode, Reply: r}, closedOutcome, here)
}

// SetModel selects the session's model by id; the answer is an *Outcome.
func (s *Session) SetModel(id string, r Reply, here *Here) (refused any) {
	return s.send(&SetModel{ID: id, Reply: r}, closedOutcome, here)
}

// SetNetwork turns the network of the session's confined commands on or
// off; the answer is an *Outcome.
func (s *Session) SetNetwork(on bool, r Reply, here *Here) (refused any) {
	return s.send(&SetNetwork{On: on, Reply: r}, closedOutcome, here)
}

// SetSandbox sets the session's sandbox mode; the answer is an *Outcome.
func (s *Session) SetSandbox(mode string, r Reply, here *Here) (refused any) {
	return s.send(&SetSandbox{Mode: mode, Reply: r}, closedOutcome, here)
}

// Replay sends the session's history as replay notifications, then
// available_commands_update; the answer, an *Outcome, follows them.
func (s *Session) Replay(r Reply, here *Here) (refused any) {
	return s.send(&Replay{Reply: r}, closedOutcome, here)
}

// Resume answers with an *Outcome describing the session, then announces
// its commands (a session taken up again without a replay).
func (s *Session) Resume(r Reply, here *Here) (refused any) {
	return s.send(&Resume{Reply: r}, closedOutcome, here)
}

// closedOutcome answers a request that reached a stopped session.
var closedOutcome = &Outcome{Err: ErrSessionClosed.Error()}

// RequestState asks for a copy of the session's state now, in the
// session's order, and returns a function that waits for it.
//
// here is as Start's.
func (s *Session) RequestState(here *Here) func() (*SessionState, error) {
	wait := s.call(func(to *actor.PID) any { return &GetState{ReplyTo: to} }, here)
	return func() (*SessionState, error) {
		res := wait()
		st, ok := res.(*SessionState)
		if !ok {
			return nil, doneErr(res)
		}
		return st, nil
	}
}

// State returns a copy of the session's state.
func (s *Session) State() (*SessionState, error) { return s.RequestState(nil)() }

// Attach moves the session to connection conn (0: to none), after every
// message sent to it before; it returns once the session has moved.
func (s *Session) Attach(conn ConnID) error {
	return s.ask(func(to *actor.PID) any { return &Attach{Conn: conn, ReplyTo: to} })
}

// Move moves the session to connection conn, after every message sent to
// it before, without waiting. taken says that another connection held it:
// its turns there are cancelled, and the session moves once they have
// ended (so what they still say goes to the connection that asked for
// them), the messages sent after the Move waiting in the session until
// then. here is as Start's.
func (s *Session) Move(conn ConnID, taken bool, here *Here) {
	if taken {
		s.Cancel(here)
	}
	s.send(&Attach{Conn: conn, settle: taken}, nil, here)
}

// Settle waits until the session has no turn running or queued: the ones
// it had ended (after a Cancel, they end cancelled) and their answers are
// queued. A session that stops meanwhile is settled too.
func (s *Session) Settle() {
	s.call(func(to *actor.PID) any { return &settle{ReplyTo: to} }, nil)()
}

// Flush writes the session file (when sessions are persisted) and returns
// once it is on disk.
func (s *Session) Flush() error {
	return s.ask(func(to *actor.PID) any { return &Flush{ReplyTo: to} })
}

// closedDone answers a call the session stopped before answering.
var closedDone = &Done{Err: ErrSessionClosed.Error()}

// call sends the message msg makes for a new call (reply.go), in the order
// of the handle's other methods, and returns a function that waits for its
// answer. Once the actor is gone, a call it did not answer is answered
// closed, after the session's file is final: a flush its writer still held
// is answered by the writer first. A session that has stopped gets
// nothing: the call is answered closed at once.
//
// here is as put's.
func (s *Session) call(msg func(to *actor.PID) any, here *Here) (wait func() any) {
	s.mu.Lock()
	if s.stopped || s.ended {
		s.mu.Unlock()
		return func() any { return closedDone }
	}
	to, r := s.rt.newReply()
	take := s.put(msg(to), here)
	s.mu.Unlock()
	if take != nil {
		take()
	}
	return func() any {
		defer s.rt.sys.ProcessRegistry.Remove(to)
		select {
		case v := <-r.ch:
			return v
		case <-s.gone:
		}
		<-s.final
		select {
		case v := <-r.ch:
			return v
		default:
			return closedDone
		}
	}
}

// ask is call and its wait, for a request answered with a *Done.
func (s *Session) ask(msg func(to *actor.PID) any) error {
	return doneErr(s.call(msg, nil)())
}

// doneErr is the error a *Done (or another reply) stands for.
func doneErr(res any) error {
	d, ok := res.(*Done)
	if !ok {
		return errUnexpected(res)
	}
	if d.Err != "" {
		return errors.New(d.Err)
	}
	return nil
}

// ErrNeverOpened ends a session whose opening failed: there was no
// session to end (OpenSession).
var ErrNeverOpened = errors.New("the session never opened")

// End ends the session after the requests already sent to it, without
// waiting: its turns are cancelled at once (the cancel overtakes them),
// every other request sent before is served, then the actor stops; with
// forget, its file is removed too. The function it returns waits until the
// session's file is final (or gone): nil, or ErrNeverOpened when the
// session's opening failed and there was nothing to end.
//
// here is as Start's.
func (s *Session) End(forget bool, here *Here) (wait func() error) {
	s.Cancel(here)
	var forgot func() any
	if forget {
		forgot = s.call(func(to *actor.PID) any { return &Forget{ReplyTo: to} }, here)
	}
	s.send(&endSession{}, nil, here)
	return func() error {
		var err error
		if forgot != nil {
			err = doneErr(forgot())
		}
		<-s.gone
		<-s.final
		if s.NeverOpened() {
			return ErrNeverOpened
		}
		return err
	}
}

// Close ends the session (End) and returns once its file is final.
func (s *Session) Close() { _ = s.End(false, nil)() }

// Stop ends the session at once: its turns are cancelled (they answer
// cancelled), the requests sent before are served (or, while it opens,
// answered closed), and the actor and its children stop (which cancels
// their streams and kills their processes).
// It returns once the actor is gone and its file final.
func (s *Session) Stop() { StopAll([]*Session{s}) }

// stopGrace is how long StopAll waits for a session to serve what it was
// sent before it is stopped as it is (a session still opening, whose store
// does not answer).
const stopGrace = 10 * time.Second

// StopAll stops sessions all at once (Stop), and returns once every one is
// gone and its file final.
func StopAll(sessions []*Session) {
	for _, s := range sessions {
		// A drain, unlike End's endSession, does not wait for a session
		// still opening: what it was sent is answered at once.
		s.send(&drain{Posted: true}, nil, nil)
	}
	late := make(chan struct{}) // closed once the grace, for them all, is over
	grace := time.AfterFunc(stopGrace, func() { close(late) })
	defer grace.Stop()
	for _, s := range sessions {
		select {
		case <-s.gone:
		case <-late:
			s.rt.log.Warn(fmt.Sprintf("[acp] session %s did not end within %s: stopped as it is", s.ID, stopGrace))
			_ = s.rt.sys.Root.StopFuture(s.pid).Wait()
			s.stopped1()
		}
	}
	for _, s := range sessions {
		<-s.final
	}
}

// stopped1 marks the session stopped: its actor is gone.
func (s *Session) stopped1() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		close(s.gone)
	}
	s.stopped = true
}
