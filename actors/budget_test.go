package actors

import (
	"context"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestBudgetHoldsBackLessThanABatch: a delta larger than what is left of
// the budget waits while a batch or more of it is on its way, and passes
// once less is held: a cluster's edge gives written bytes back a batch at
// a time, and keeps the rest (less than a batch) until more is written.
func TestBudgetHoldsBackLessThanABatch(t *testing.T) {
	b := newBudget(streamBudget)
	if err := b.take(t.Context(), streamBudget-100); err != nil {
		t.Fatal(err)
	}
	took := make(chan error, 1)
	go func() { took <- b.take(context.Background(), streamBudget) }()
	select {
	case err := <-took:
		t.Fatalf("a whole budget's delta was taken while %d bytes were held: %v", streamBudget-100, err)
	case <-time.After(50 * time.Millisecond):
	}
	// Written and given back but for less than a batch, as an edge keeps it.
	b.Give(streamBudget - 100 - (CreditBatch - 1))
	select {
	case err := <-took:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testwait.Hang):
		t.Fatalf("the delta still waits with %d bytes held, less than a batch (%d)", CreditBatch-1, CreditBatch)
	}
	// tryTake (a command's output) follows the same rule, without waiting.
	b = newBudget(streamBudget)
	if !b.tryTake(streamBudget - 100) {
		t.Fatal("tryTake refused what fits")
	}
	if b.tryTake(streamBudget) {
		t.Error("tryTake took a whole budget's output while a batch or more was held")
	}
	b.Give(streamBudget - 100 - (CreditBatch - 1))
	if !b.tryTake(streamBudget) {
		t.Error("tryTake refused a whole budget's output with less than a batch held")
	}
}
