package actors

import (
	"context"
	"sync"
)

// streamBudget is how many bytes of streamed model output one session may
// have on their way to the client: sent by the model goroutine but not yet
// written on stdout. A quarter of a megabyte is seconds of any model's
// output, so a client that reads keeps the stream flowing; one that stops
// reading stops the model stream there, not in mm's memory.
const streamBudget = 256 << 10

// Budget bounds the streamed output a session has waiting to be written.
// The model goroutine takes from it before it sends each delta to the
// session actor, and waits while it is spent (it runs outside the actor
// system: waiting there is fine); the outbox gives back once the delta is
// written; the session actor gives back the deltas it drops. It is safe for
// concurrent use.
type Budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	used  int
	limit int
}

func newBudget(limit int) *Budget {
	b := &Budget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// take waits until n more bytes fit, and takes them. A delta larger than
// the whole budget passes once nothing else waits. It fails only when ctx
// ends (a cancelled stream), having taken nothing.
func (b *Budget) take(ctx context.Context, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 || b.used+n <= b.limit {
		b.used += n
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	for b.used > 0 && b.used+n > b.limit {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.cond.Wait()
	}
	b.used += n
	return nil
}

// tryTake takes n bytes if they fit now (or nothing else is taken), and
// says whether it did; it never waits.
func (b *Budget) tryTake(n int) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 || b.used+n <= b.limit {
		b.used += n
		return true
	}
	return false
}

// Give returns n bytes: their delta was written, or dropped.
func (b *Budget) Give(n int) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// cost is what a delta takes from the budget: its bytes, at least one.
func cost(text string) int { return max(1, len(text)) }
