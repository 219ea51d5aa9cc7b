package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// A session answers every request it took, also when it stops: it drains
// before it goes. Every end is in its mailbox's order:
//   - the edge's marks the handle ended and sends, behind what it sent
//     before, endSession (Session.End: served in the session's order, after
//     its opening) or drain (Stop, StopAll: at once, an opening session
//     answering what it kept): what comes after never reaches the actor,
//     and the handle refuses it, closed, for the request's server (the
//     edge) to answer;
//   - the session's own when its save was fenced, and the cluster's (a
//     grain poisoned when its identity moves or its node leaves: the
//     PoisonPill is taken as a drain, sessionMiddleware), mark the handle
//     ended and send the session drained, behind what the edge sent
//     before;
//   - a session whose opening failed answers what it kept at once, then
//     what is still on its way as it comes, and leaves (leave) once it
//     took all its handle sent: only then does the handle refuse on its
//     own, so that no request is answered ahead of one sent before it.
// When the end comes, the edge's messages the session still keeps (its
// stash, while it opened or moved) are answered (refuse), and what the
// edge sent after the end is refused as it comes; then the actor stops;
// its turns end cancelled as it stops (onStopping).

// drain asks a session to end itself, in its order: posted by its handle
// (StopAll), or a PoisonPill as the session's middleware hands it.
type drain struct{ Posted bool }

// posted says whether msg came through the handle's post, which counts
// what it sends (Session.sent): the edge's messages and its drains.
func posted(msg any) bool {
	if d, ok := msg.(*drain); ok {
		return d.Posted
	}
	return fromEdge(msg)
}

// drained is the end of a session's drain: what the edge sent before it
// has been taken.
type drained struct{}

// endItself starts the session's own end: the handle sends nothing more,
// and drained comes behind what it sent.
func (s *session) endItself(ctx actor.Context) {
	if s.handle != nil {
		s.handle.end()
	}
	ctx.Send(ctx.Self(), &drained{})
}

// stop answers what the session still keeps, and ends it: an open
// session closes up and stops once its file is final (closeUp), one that
// never opened at once.
func (s *session) stop(ctx actor.Context) {
	kept := s.stash
	s.stash, s.moving, s.unstashing = nil, nil, false
	s.ending = true
	for _, m := range kept {
		s.refuse(m)
	}
	switch {
	case s.closing: // closing up already: it stops once its file is final
	case s.opening:
		s.leave(ctx)
	default:
		s.closeUp(ctx, ctx.Self())
	}
}

// leave stops a session that never opened once it took all its handle
// sent it (Session.leave); until then it refuses what comes (take).
func (s *session) leave(ctx actor.Context) {
	s.leaving = true
	if s.handle == nil || s.handle.leave(s.received) {
		ctx.Stop(ctx.Self())
	}
}

// refuse answers an edge's message the session ends before serving: a
// prompt cancelled, a request closed, or with why its opening failed.
func (s *session) refuse(msg any) {
	closed := any(closedOutcome)
	var r Reply
	switch m := msg.(type) {
	case *StartTurn:
		r, closed = m.Reply, &TurnResult{StopReason: acp.StopReasonCancelled}
	case *SetMode:
		r = m.Reply
	case *SetModel:
		r = m.Reply
	case *SetSandbox:
		r = m.Reply
	case *SetNetwork:
		r = m.Reply
	case *Replay:
		r = m.Reply
	case *Resume:
		r = m.Reply
	case *Flush, *Forget, *GetState, *Attach, *settle:
		if to := replyTo(m); to != nil {
			s.rt.sys.Root.Send(to, closedDone)
		}
		return
	default:
		return // a cancel, an announce, an end: nothing waits for them
	}
	if s.failed != nil {
		closed = s.failed
	}
	s.answer(r, closed)
}

// replyTo is where a call's answer goes (reply.go).
func replyTo(call any) *actor.PID {
	switch m := call.(type) {
	case *Flush:
		return m.ReplyTo
	case *Forget:
		return m.ReplyTo
	case *GetState:
		return m.ReplyTo
	case *Attach:
		return m.ReplyTo
	case *settle:
		return m.ReplyTo
	}
	return nil
}

// sessionMiddleware hands a session a PoisonPill as a drain: protoactor
// would stop the actor at once and drop what waits in its mailbox, the
// requests of the edge's among it, unanswered.
func sessionMiddleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		if _, ok := env.Message.(*actor.PoisonPill); ok {
			env = &actor.MessageEnvelope{Header: env.Header, Message: &drain{}, Sender: env.Sender}
		}
		next(c, env)
	}
}
