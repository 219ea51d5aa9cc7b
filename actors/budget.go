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

// CreditBatch is the most of a session's written output whose bytes may
// not have come back to its budget yet: a cluster's edge gives the bytes
// it wrote back in batches of this size (grains), one message for many
// updates rather than one each. A delta larger than what is left of the
// budget therefore waits only until less than a batch is held, which a
// stream that is written always reaches, rather than until nothing is.
const CreditBatch = streamBudget / 16

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
// what is left passes once less than a CreditBatch is held. It fails only
// when ctx ends (a cancelled stream), having taken nothing.
func (b *Budget) take(ctx context.Context, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fits(n) {
		b.used += n
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	for !b.fits(n) {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.cond.Wait()
	}
	b.used += n
	return nil
}

// fits says whether n more bytes may be taken now (b.mu held).
func (b *Budget) fits(n int) bool { return b.used < CreditBatch || b.used+n <= b.limit }

// tryTake takes n bytes if they fit now, and says whether it did; it
// never waits.
func (b *Budget) tryTake(n int) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fits(n) {
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
