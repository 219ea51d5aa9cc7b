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

// TestGoWhileClosing: a Go that comes while Close waits, every goroutine
// having ended, is run and counted without a race (a WaitGroup's Add at
// zero during its Wait was one: the race detector says so).
func TestGoWhileClosing(t *testing.T) {
	for range 200 {
		var c Cache
		c.Go(func() {})
		var ran atomic.Int32
		called := make(chan struct{})
		go func() {
			defer close(called)
			c.Go(func() { ran.Add(1) })
		}()
		c.Close()
		<-called
		c.Close() // a second Close waits for what the first did not see
		if ran.Load() != 1 {
			t.Fatal("a Go during Close did not run")
		}
	}
}
