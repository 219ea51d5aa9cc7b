package actors

import "github.com/asynkron/protoactor-go/actor"

// A session moves between connections (Attach) in its order. Taken from a
// connection that still holds it, it moves only once the turns it runs
// there have ended, and keeps the edge's messages that come meanwhile,
// serving them in order once moved (the stash).

// fromEdge says whether msg is one the edge sends a session (Session's
// methods): those wait while the session moves.
func fromEdge(msg any) bool {
	switch msg.(type) {
	case *StartTurn, *CancelTurns, *CancelRequest, *Announce, *Flush, *Replay, *Resume, *GetState,
		*Attach, *settle, *Forget, *SetMode, *SetModel, *SetSandbox, *SetNetwork, *endSession:
		return true
	}
	return false
}

// keep appends msg to what a session keeps while it opens or moves. A run
// of cancels of every prompt is kept as its last one, which covers the
// others: a client's notifications take no place among its requests in
// flight, so cancels are the one thing it could send without bound.
func keep(kept []any, msg any) []any {
	if c, ok := msg.(*CancelTurns); ok && !c.Only && len(kept) > 0 {
		if last, ok := kept[len(kept)-1].(*CancelTurns); ok && !last.Only {
			kept[len(kept)-1] = c
			return kept
		}
	}
	if c, ok := msg.(*CancelRequest); ok {
		// The same request cancelled again: once is enough.
		for _, k := range kept {
			if o, ok := k.(*CancelRequest); ok && o.ID == c.ID {
				return kept
			}
		}
	}
	return append(kept, msg)
}

// onAttach moves the session to another connection (or none). A tool call
// running keeps the client it started with. A move that settles first
// waits for the session's turns to end (the edge cancelled them), and the
// edge's messages after it wait with it.
func (s *session) onAttach(ctx actor.Context, m *Attach) {
	if m.settle && !s.idle() {
		s.moving = m
		return
	}
	s.attach(ctx, m)
}

func (s *session) attach(ctx actor.Context, m *Attach) {
	on := s.rt.connection(m.Conn)
	s.out, s.client = on.Out, on.Client
	if s.out == nil {
		s.out = discard{root: ctx.ActorSystem().Root}
	}
	if s.client == nil {
		s.client = nobody{}
	}
	if m.ReplyTo != nil {
		ctx.Send(m.ReplyTo, &Done{})
	}
}

// moved ends a move that waited for the session's turns: the session is
// attached to its new connection, then serves what it kept meanwhile, in
// order, behind anything the edge sends meanwhile (unstashing).
func (s *session) moved(ctx actor.Context) {
	m := s.moving
	if m == nil {
		return
	}
	s.moving = nil
	s.attach(ctx, m)
	s.unstashing = true
	ctx.Send(ctx.Self(), &unstash{})
}

// onUnstash serves the messages kept while the session moved, until none
// is left or one of them is a move that waits again.
func (s *session) onUnstash(ctx actor.Context) {
	for len(s.stash) > 0 && s.moving == nil {
		msg := s.stash[0]
		s.stash[0] = nil
		s.stash = s.stash[1:]
		s.receive(ctx, msg)
		if _, ok := msg.(*endSession); ok {
			// The end answered what came after it (stop).
			s.stash = nil
			break
		}
	}
	if s.moving == nil {
		s.stash, s.unstashing = nil, false
	}
}
