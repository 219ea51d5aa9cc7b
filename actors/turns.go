package actors

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// turnSerializer grants turn slots: at most slots turns run at once across
// the process, and waiting turns are served first come, first served,
// whatever their session. It owns no other state; its Receive never blocks.
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
	queue   []waiting
	// checking is set while a checkWaits is on its way: one timer for
	// every turn that waits, not one per turn.
	checking bool
}

// waiting is a turn in the queue, since when, and whether its session was
// told how long the queue is.
type waiting struct {
	acquireSlot
	since time.Time
	told  bool
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
		t.queue = append(t.queue, waiting{acquireSlot: *m, since: time.Now()})
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
		for i, q := range t.queue {
			if q.Turn == m.Turn {
				t.queue = append(t.queue[:i], t.queue[i+1:]...)
				return
			}
		}
	case *actor.Restarting:
		t.log.Error(fmt.Sprintf("turn serializer failed; restarting with %d turn(s) running and %d queued", len(t.running), len(t.queue)))
	case *actor.Started:
		t.grant(ctx) // after a restart, the queue goes on
	}
}

// grant hands free slots to the head of the queue.
func (t *turnSerializer) grant(ctx actor.Context) {
	for len(t.running) < t.slots && len(t.queue) > 0 {
		q := t.queue[0]
		t.queue[0] = waiting{}
		t.queue = t.queue[1:]
		ctx.Send(q.Session, &slotGranted{Turn: q.Turn})
		t.running[q.Turn] = struct{}{}
	}
	if len(t.queue) == 0 {
		t.queue = nil // let a long burst's backing array go
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
	for _, q := range t.queue {
		if !q.told {
			t.checking = true
			root, self := ctx.ActorSystem().Root, ctx.Self()
			time.AfterFunc(max(0, slotPatience-time.Since(q.since)), func() { root.Send(self, &checkWaits{}) })
			return
		}
	}
}

// tellWaits tells the sessions of the turns waiting longer than
// slotPatience how many turns are ahead of theirs, once per stay in the
// queue.
func (t *turnSerializer) tellWaits(ctx actor.Context) {
	now := time.Now()
	for i := range t.queue {
		q := &t.queue[i]
		if !q.told && now.Sub(q.since) >= slotPatience {
			q.told = true
			ctx.Send(q.Session, &slotQueue{Turn: q.Turn, Ahead: len(t.running) + i})
		}
	}
}
