package actors

import (
	"github.com/asynkron/protoactor-go/actor"
)

// turnSerializer grants turn slots: at most slots turns run at once across
// the process, and waiting turns are served first come, first served, whatever
// their session. It owns no other state; its Receive never blocks.
type turnSerializer struct {
	slots   int
	running map[uint64]struct{}
	queue   []acquireSlot
}

func newTurnSerializer(slots int) *turnSerializer {
	return &turnSerializer{slots: slots, running: make(map[uint64]struct{})}
}

func (t *turnSerializer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *acquireSlot:
		t.queue = append(t.queue, *m)
		t.grant(ctx)
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
	}
}

// grant hands free slots to the head of the queue.
func (t *turnSerializer) grant(ctx actor.Context) {
	for len(t.running) < t.slots && len(t.queue) > 0 {
		q := t.queue[0]
		t.queue[0] = acquireSlot{}
		t.queue = t.queue[1:]
		t.running[q.Turn] = struct{}{}
		ctx.Send(q.Session, &slotGranted{Turn: q.Turn})
	}
	if len(t.queue) == 0 {
		t.queue = nil // let a long burst's backing array go
	}
}
