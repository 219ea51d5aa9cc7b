package gopool

import (
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReuseAndClose: goroutines are reused, every function runs once, and
// Close leaves none behind.
func TestReuseAndClose(t *testing.T) {
	c := &Cache{MaxIdle: 4}
	var ran atomic.Int64
	var wg sync.WaitGroup
	for round := 0; round < 50; round++ {
		for i := 0; i < 4; i++ {
			wg.Add(1)
			c.Go(func() { ran.Add(1); wg.Done() })
		}
		wg.Wait()
	}
	if ran.Load() != 200 {
		t.Fatalf("ran %d functions, want 200", ran.Load())
	}
	c.mu.Lock()
	idle := len(c.idle)
	c.mu.Unlock()
	if idle == 0 || idle > 4 {
		t.Errorf("%d idle goroutines, want 1..4", idle)
	}
	c.Close()
	done := make(chan struct{})
	c.Go(func() { close(done) }) // after Close: still runs
	<-done
}
