package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/mm-agent/mm/store"
)

// A session kept in Postgres may have been served by another activation
// since this copy's last save (a node counted out, a partition): before
// each turn and each replay the copy asks its writer whether it still holds
// the session (store.Writer.Check), and reads it again when it does not.

// checkHolds asks the session's writer whether this copy still holds the
// session (store.Writer.Check) before turn, or before replay; the answer
// comes back to the actor as a holds.
func (s *session) checkHolds(ctx actor.Context, turn uint64, replay *Replay) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	s.writer.Check(func(err error) { root.Send(self, holdsOf(turn, replay, err)) })
}

// holdsOf is the check's error as data: its kind and its text.
func holdsOf(turn uint64, replay *Replay, err error) *holds {
	m := &holds{Turn: turn, Replay: replay}
	switch {
	case err == nil || errors.Is(err, store.ErrClosed):
		// A closed writer: the session is ending, and says so itself.
		m.Holding = held
	case errors.Is(err, store.ErrFenced):
		m.Holding, m.Err = fencedOff, err.Error()
	default:
		m.Holding, m.Err = unreachable, err.Error()
	}
	return m
}

// onHolds goes on with the turn or the replay that waited for the check.
// A copy that no longer holds the session reads it again from the store
// and goes on from there; one whose store cannot be asked runs nothing
// it could not keep.
func (s *session) onHolds(ctx actor.Context, m *holds) {
	t := s.cur
	if m.Replay == nil && (t == nil || t.id != m.Turn || t.state != turnChecking) {
		return // cancelled meanwhile
	}
	switch {
	case m.Holding == held:
		s.goOn(ctx, m.Turn, m.Replay)
	case m.Holding == fencedOff && !s.fenced && (m.Replay == nil || s.cur == nil):
		s.rt.log.Info(fmt.Sprintf("[acp] session %s: another mm saved it since this copy did (%s): reading it again", s.id, m.Err))
		st, cwd, id, turnID, replay := s.rt.store, s.cwd, s.id, m.Turn, m.Replay
		root, self := ctx.ActorSystem().Root, ctx.Self()
		s.rt.goWork(func() {
			f, where, err := st.Load(context.Background(), cwd, id)
			r := &reloaded{Turn: turnID, Replay: replay, File: f, Where: where}
			if err != nil {
				r.File, r.Err = nil, err.Error()
			}
			root.Send(self, r)
		})
	case m.Holding == fencedOff:
		s.stopStale(ctx, m.Turn, m.Replay, m.Err)
	default:
		why := fmt.Sprintf("session %s: its store cannot be reached, so what this copy holds cannot be checked against it and nothing would be kept (%s); try again once it is back", s.id, m.Err)
		s.rt.log.Error("[acp] " + why)
		if m.Replay != nil {
			s.answer(m.Replay.Reply, &Outcome{Err: why})
			return
		}
		t.histStart = len(s.history)
		t.state = turnQueued
		s.finish(ctx, t, "", why)
	}
}

// onReloaded takes what the store holds in place of this copy's history,
// then goes on with the turn or the replay that waited for it. What was
// read must be this session as this copy would have opened it (trusted,
// the same folder and owner); otherwise the copy stops.
func (s *session) onReloaded(ctx actor.Context, m *reloaded) {
	if m.Replay == nil && (s.cur == nil || s.cur.id != m.Turn || s.cur.state != turnChecking) {
		return // cancelled meanwhile: the next turn checks again
	}
	if m.Err != "" {
		s.stopStale(ctx, m.Turn, m.Replay, m.Err)
		return
	}
	st := StateFromFile(m.File, m.Where, s.cwd)
	if st.Untrusted != "" || st.Owner != s.owner {
		s.stopStale(ctx, m.Turn, m.Replay, "what the store holds now is not this session as it was opened: "+st.Untrusted)
		return
	}
	old := s.writer
	s.rt.goWork(old.Close)
	s.history, s.plan, s.usage, s.prov, s.rev = st.History, st.Plan, usageFromStore(st.Usage), st.Provenance, st.Rev
	if st.Mode != "" {
		s.mode = st.Mode
	}
	s.sys.dirty = true // the stored system message is the other copy's
	s.startPersistence(ctx)
	s.rt.log.Info(fmt.Sprintf("[acp] session %s: read again from %s at version %d (%d message(s))", s.id, m.Where, st.Rev, len(s.history)-1))
	s.goOn(ctx, m.Turn, m.Replay)
}

// goOn runs the turn or the replay that waited for a check.
func (s *session) goOn(ctx actor.Context, turnID uint64, replay *Replay) {
	if replay != nil {
		s.replay(replay)
		return
	}
	t := s.cur
	t.state = turnQueued
	s.prepare(ctx, t)
	if s.cur == nil {
		s.next(ctx)
	}
}

// stopStale stops a copy that no longer holds its session and cannot read
// it again, answering the turn or the replay that waited with why.
func (s *session) stopStale(ctx actor.Context, turnID uint64, replay *Replay, reason string) {
	if replay != nil {
		s.answer(replay.Reply, &Outcome{Err: s.fencedWhy()})
	} else if t := s.cur; t != nil && t.id == turnID {
		// Answered through the held reply onFenced answers.
		res := &TurnResult{Err: s.fencedWhy()}
		s.turnEnded(t, res)
		s.held = &heldReply{answer: t.out, res: res}
	}
	s.onFenced(ctx, &fenced{Err: reason})
}
