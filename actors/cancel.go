package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// Cancellation. A cancel names the prompts it covers by their sequence in
// the session (every one up to a number, or one alone), so that a cancel
// that overtakes its prompt in the mailbox still finds it, and an idle
// cancel covers none of the prompts that follow it. A running turn is
// cancelled by poisoning the actors working for it; it ends once each has
// sent its last message, so nothing it started outlives its answer.

// covers says whether the cancel m covers prompt seq.
func (m *CancelTurns) covers(seq uint64) bool {
	if m.Only {
		return seq == m.UpTo
	}
	return seq <= m.UpTo
}

// onCancelRequest cancels the turn answering request m.ID, or, when it
// has not arrived, notes that it arrives cancelled.
func (s *session) onCancelRequest(ctx actor.Context, m *CancelRequest) {
	if m.ID.IsZero() {
		return
	}
	for _, t := range append([]*turn{s.cur}, s.queue...) {
		if t != nil && t.out.ID == m.ID {
			s.onCancel(ctx, &CancelTurns{UpTo: t.seq, Only: true})
			return
		}
	}
	if s.cancelIDs == nil {
		s.cancelIDs = map[jsonrpc.ID]bool{}
	}
	if len(s.cancelIDs) < maxWaiting {
		s.cancelIDs[m.ID] = true
	}
}

func (s *session) onCancel(ctx actor.Context, m *CancelTurns) {
	switch {
	case !m.Only:
		s.cancelUpTo = max(s.cancelUpTo, m.UpTo)
	case m.UpTo > s.lastSeq:
		// Its StartTurn is still behind in the mailbox.
		if s.cancelOne == nil {
			s.cancelOne = map[uint64]bool{}
		}
		s.cancelOne[m.UpTo] = true
	}
	kept := s.queue[:0]
	for _, q := range s.queue {
		if m.covers(q.seq) {
			res := &TurnResult{StopReason: acp.StopReasonCancelled, Usage: s.usage.acp()}
			s.turnEnded(q, res)
			s.reply(q, res)
			continue
		}
		kept = append(kept, q)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	t := s.cur
	if t == nil || s.held != nil || !m.covers(t.seq) || t.cancelled {
		return // a held turn is over: it only waits for the disk
	}
	t.cancelled = true
	switch t.state {
	case turnChecking, turnPreparing:
		// The check's or the lookup's result will find the turn gone.
		s.finish(ctx, t, acp.StopReasonCancelled, "")
		return
	case turnWaiting:
		// Out of the serializer's queue; a grant already on its way is
		// handed back by onSlot.
		ctx.Send(s.rt.turns, &releaseSlot{Turn: t.id})
		t.state = turnEnding
	}
	s.keepAnswer(t)
	if len(t.live) == 0 {
		s.finish(ctx, t, acp.StopReasonCancelled, "")
		return
	}
	// Poison the in-flight work. Each goroutine sends its final message
	// once its context is cancelled (a bash command's process group
	// killed, a permission request abandoned); the turn ends when the last
	// one has.
	for _, pid := range t.live {
		ctx.Poison(pid)
	}
	if _, ok := t.live["model"]; ok {
		s.model = nil // poisoned: the next call gets a new one
	}
	t.resume = nil
}

// settle stops the child under key, whose work is over. It reports whether
// the turn was cancelled meanwhile (and finishes it when nothing is left).
func (s *session) settle(ctx actor.Context, t *turn, key string) (cancelled bool) {
	if pid, ok := t.live[key]; ok {
		// A cancelled turn's children are already poisoned; the model
		// actor is otherwise kept for the next call.
		if !t.cancelled && key != "model" {
			ctx.Stop(pid)
		}
		delete(t.live, key)
	}
	if t.cancelled {
		if len(t.live) == 0 {
			s.finish(ctx, t, acp.StopReasonCancelled, "")
		}
		return true
	}
	return false
}
