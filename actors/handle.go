package actors

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// maxWaiting bounds the prompts of one session that may wait unanswered:
// a client that sends more before the first ones end is refused.
const maxWaiting = 64

// ErrTooManyPrompts refuses a prompt beyond maxWaiting.
var ErrTooManyPrompts = fmt.Errorf("more than %d prompts of this session are waiting for their turn", maxWaiting)

// Session is the edge's handle on a session actor. Its methods are safe for
// concurrent use; Start and Cancel number the session's prompts in the
// order they are called, so the edge calls them in the order it reads its
// client's messages.
type Session struct {
	ID  string
	Cwd string
	pid *actor.PID
	rt  *Runtime

	// started numbers the prompts handed to Start.
	started atomic.Uint64
	// open are the replies of the turns started, some maybe answered
	// already; once stopped, the ones left are answered here.
	mu      sync.Mutex
	open    []*Reply
	stopped bool
}

// SpawnSession starts the actor of a session: a new one (only ID and Cwd
// set) or one loaded or forked from st. The system prompt is always the
// current one.
func (rt *Runtime) SpawnSession(st *SessionState) *Session {
	s := newSession(rt, st)
	pid := rt.sys.Root.Spawn(rt.props(func() actor.Actor { return s },
		actor.WithMailbox(actor.UnboundedPriorityMpsc()),
		actor.WithSupervisor(stopChildren)))
	return &Session{ID: st.ID, Cwd: st.Cwd, pid: pid, rt: rt}
}

// stopChildren stops a failed child (a model or tool actor) instead of
// restarting it: its goroutine reports the failure itself, and a restart
// would run the call twice.
var stopChildren = actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
	return actor.StopDirective
})

// Start starts one prompt's turn without waiting for it and returns its
// number in the session. Its result comes back through the Outbox's Answer,
// behind the turn's updates, exactly once — cancelled if the session stops
// before the turn has run. It fails, having started nothing, when too many
// of the session's prompts wait already.
func (s *Session) Start(prompt []acp.ContentBlock, r *Reply) (uint64, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.rt.answer(s.ID, r, &TurnResult{StopReason: acp.StopReasonCancelled})
		return 0, nil
	}
	// Drop the answered ones first: a session has a prompt or two in
	// flight, not a growing list.
	open := s.open[:0]
	for _, o := range s.open {
		if !o.answered.Load() {
			open = append(open, o)
		}
	}
	clear(s.open[len(open):])
	s.open = open
	if len(open) >= maxWaiting {
		s.mu.Unlock()
		return 0, ErrTooManyPrompts
	}
	s.open = append(open, r)
	seq := s.started.Add(1)
	s.rt.sys.Root.Send(s.pid, &StartTurn{Seq: seq, Prompt: prompt, Reply: r})
	s.mu.Unlock()
	return seq, nil
}

// Prompt runs one prompt's turn and waits for its result. It is Start for a
// caller that answers the request itself; never for actors.
func (s *Session) Prompt(prompt []acp.ContentBlock) (*TurnResult, error) {
	r := &Reply{Done: make(chan *TurnResult, 1)}
	if _, err := s.Start(prompt, r); err != nil {
		return nil, err
	}
	return <-r.Done, nil
}

// Cancel cancels the session's prompts started so far, running or queued;
// the prompts started after it are not affected.
func (s *Session) Cancel() {
	s.rt.sys.Root.Send(s.pid, &CancelTurns{UpTo: s.started.Load()})
}

// CancelPrompt cancels prompt seq alone (its request was cancelled).
func (s *Session) CancelPrompt(seq uint64) {
	s.rt.sys.Root.Send(s.pid, &CancelTurns{UpTo: seq, Only: true})
}

// Announce tells the session that the response carrying its id is queued:
// available_commands_update may follow it.
func (s *Session) Announce() {
	s.rt.sys.Root.Send(s.pid, &Announce{})
}

// Replay sends the session's history as replay notifications, then
// available_commands_update, and returns once they are written.
func (s *Session) Replay() *Replayed {
	res, err := s.rt.sys.Root.RequestFuture(s.pid, &Replay{}, -1).Result()
	if err != nil {
		return &Replayed{}
	}
	if r, ok := res.(*Replayed); ok {
		return r
	}
	return &Replayed{}
}

// State returns a copy of the session's state.
func (s *Session) State() (*SessionState, error) {
	res, err := s.rt.sys.Root.RequestFuture(s.pid, &GetState{}, -1).Result()
	if err != nil {
		return nil, err
	}
	st, ok := res.(*SessionState)
	if !ok {
		return nil, errUnexpected(res)
	}
	return st, nil
}

// Flush writes the session file (when sessions are persisted) and returns
// once it is on disk.
func (s *Session) Flush() error { return s.ask(&Flush{}) }

// SetMode switches the session's mode ("ask" or "yolo").
func (s *Session) SetMode(mode string) error { return s.ask(&SetMode{Mode: mode}) }

// SetModel selects the session's model by id.
func (s *Session) SetModel(id string) error { return s.ask(&SetModel{ID: id}) }

func (s *Session) ask(msg any) error {
	res, err := s.rt.sys.Root.RequestFuture(s.pid, msg, -1).Result()
	if err != nil {
		return err
	}
	d, ok := res.(*Done)
	if !ok {
		return errUnexpected(res)
	}
	if d.Err != "" {
		return errors.New(d.Err)
	}
	return nil
}

// Delete stops the session like Stop and removes its file, once any save
// in flight is written.
func (s *Session) Delete() error {
	removed := make(chan struct{})
	if err := s.ask(&Forget{Removed: removed}); err != nil {
		return err
	}
	s.Stop()
	<-removed
	return nil
}

// Stop stops the session actor and its children (which cancels their
// streams and kills their processes); its turns answer cancelled. It waits
// until the actor is gone.
func (s *Session) Stop() { StopAll([]*Session{s}) }

// StopAll stops sessions all at once, and returns once every one is gone.
func StopAll(sessions []*Session) {
	futures := make([]*actor.Future, len(sessions))
	for i, s := range sessions {
		futures[i] = s.rt.sys.Root.StopFuture(s.pid)
	}
	for i, s := range sessions {
		_ = futures[i].Wait()
		// A StartTurn still in the mailbox when the actor stopped is
		// dropped by protoactor; its prompt is answered here.
		s.mu.Lock()
		s.stopped = true
		open := s.open
		s.open = nil
		s.mu.Unlock()
		for _, r := range open {
			s.rt.answer(s.ID, r, &TurnResult{StopReason: acp.StopReasonCancelled})
		}
	}
}
