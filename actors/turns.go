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
	// queue holds the waiting turns in the order they came.
	queue []waiting
	// served is, by owner, when a turn of theirs was last granted (a
	// count of grants); tick counts the grants.
	served map[string]uint64
	tick   uint64
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
	return &turnSerializer{slots: slots, log: log, running: make(map[uint64]struct{}), served: map[string]uint64{}}
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

// grant hands free slots to the turns next in line.
func (t *turnSerializer) grant(ctx actor.Context) {
	for len(t.running) < t.slots && len(t.queue) > 0 {
		i := next(t.queue, t.served)
		q := t.queue[i]
		t.queue = append(t.queue[:i], t.queue[i+1:]...)
		t.tick++
		t.served[q.Owner] = t.tick
		ctx.Send(q.Session, &slotGranted{Turn: q.Turn})
		t.running[q.Turn] = struct{}{}
	}
	if len(t.queue) == 0 {
		t.queue = nil // let a long burst's backing array go
		if len(t.served) > maxOwnersServed {
			clear(t.served) // only the order of waiting owners matters
		}
	}
}

// maxOwnersServed bounds what the serializer remembers of owners it served:
// past it, once no turn waits, it forgets them all.
const maxOwnersServed = 4096

// next is the index in queue of the turn next in line: the first one of
// the owner served least lately (never, first), as served says.
func next(queue []waiting, served map[string]uint64) int {
	best := 0
	for i := 1; i < len(queue); i++ {
		if served[queue[i].Owner] < served[queue[best].Owner] {
			best = i
		}
	}
	return best
}

// ahead says, for each turn of the queue, how many queued turns would be
// granted before it if no other came.
func ahead(queue []waiting, served map[string]uint64) map[uint64]int {
	q := append([]waiting(nil), queue...)
	s := make(map[string]uint64, len(served))
	for k, v := range served {
		s[k] = v
	}
	var tick uint64
	for _, v := range s {
		tick = max(tick, v)
	}
	out := make(map[uint64]int, len(q))
	for n := 0; len(q) > 0; n++ {
		i := next(q, s)
		out[q[i].Turn] = n
		tick++
		s[q[i].Owner] = tick
		q = append(q[:i], q[i+1:]...)
	}
	return out
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
	var order map[uint64]int
	for i := range t.queue {
		q := &t.queue[i]
		if !q.told && now.Sub(q.since) >= slotPatience {
			if order == nil {
				order = ahead(t.queue, t.served)
			}
			q.told = true
			ctx.Send(q.Session, &slotQueue{Turn: q.Turn, Ahead: len(t.running) + order[q.Turn]})
		}
	}
}
