package actors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// turnSerializer grants turn slots: at most slots turns run at once across
// the process. A free slot goes to the token (the session's owner) served
// least lately, among those with a turn waiting, and within a token to its
// turn that has waited longest: one tenant's queue of slow turns does not
// keep another's waiting behind all of it (on one node of a cluster: each
// node serializes its own sessions' turns). A session waits with one turn
// at most, so sessions of one owner take their turns first come, first
// served. It owns no other state; its Receive never blocks.
//
// It is supervised by protoactor (spawnTurns): a panic restarts it, and the
// restart keeps its queue and its running turns, since the producer hands
// back the same instance; once restarted it grants again. A request that
// made it fail is taken off the queue before it is answered, so it cannot
// fail it twice.
type turnSerializer struct {
	slots   int
	log     *slog.Logger
	running map[uint64]struct{}
	// queue holds the waiting turns (fair.go's order).
	queue fairQueue
	// checking is set while a checkWaits is on its way: one timer for
	// every turn that waits, not one per turn.
	checking bool
}

func newTurnSerializer(slots int, log *slog.Logger) *turnSerializer {
	return &turnSerializer{slots: slots, log: log, running: make(map[uint64]struct{})}
}

// spawnTurns starts the turn serializer under a guardian that restarts it
// whatever happens, as often as it fails.
func (rt *Runtime) spawnTurns(slots int) *actor.PID {
	t := newTurnSerializer(slots, rt.log)
	return rt.sys.Root.Spawn(rt.props(func() actor.Actor { return t },
		actor.WithGuardian(actor.NewRestartingStrategy())))
}

func (t *turnSerializer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *acquireSlot:
		t.queue.push(waiting{acquireSlot: *m, since: time.Now()})
		t.grant(ctx)
		t.watch(ctx)
	case *checkWaits:
		t.checking = false
		t.tellWaits(ctx)
		t.watch(ctx)
	case *releaseSlot:
		if _, ok := t.running[m.Turn]; ok {
			delete(t.running, m.Turn)
			t.grant(ctx)
			return
		}
		t.queue.remove(m.Turn)
	case *actor.Restarting:
		t.log.Error(fmt.Sprintf("turn serializer failed; restarting with %d turn(s) running and %d queued", len(t.running), t.queue.len()))
	case *actor.Started:
		t.grant(ctx) // after a restart, the queue goes on
	}
}

// grant hands free slots to the turns next in line.
func (t *turnSerializer) grant(ctx actor.Context) {
	for len(t.running) < t.slots {
		q, ok := t.queue.pop()
		if !ok {
			return
		}
		ctx.Send(q.Session, &slotGranted{Turn: q.Turn})
		t.running[q.Turn] = struct{}{}
	}
}

// slotPatience is how long a turn waits for its slot before its session
// is told why nothing happens: with turns.concurrency 1, a long command in
// one thread otherwise freezes every other thread silently.
const slotPatience = time.Second

// watch arms the check of the waiting turns when one waits untold.
func (t *turnSerializer) watch(ctx actor.Context) {
	if t.checking {
		return
	}
	var untold *waiting // the one that came first
	t.queue.each(func(q *waiting) bool {
		if !q.told && (untold == nil || q.since.Before(untold.since)) {
			untold = q
		}
		return true
	})
	if untold != nil {
		t.checking = true
		root, self := ctx.ActorSystem().Root, ctx.Self()
		time.AfterFunc(max(0, slotPatience-time.Since(untold.since)), func() { root.Send(self, &checkWaits{}) })
	}
}

// tellWaits tells the sessions of the turns waiting longer than
// slotPatience how many turns are ahead of theirs, once per stay in the
// queue.
func (t *turnSerializer) tellWaits(ctx actor.Context) {
	now := time.Now()
	var order map[uint64]int
	t.queue.each(func(q *waiting) bool {
		if !q.told && now.Sub(q.since) >= slotPatience {
			if order == nil {
				order = t.queue.ahead()
			}
			q.told = true
			ctx.Send(q.Session, &slotQueue{Turn: q.Turn, Ahead: len(t.running) + order[q.Turn]})
		}
		return true
	})
}
