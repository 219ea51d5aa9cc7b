package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

func TestWriterCoalesces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s", "x.json")
	var writes atomic.Int32
	stall, stalled := make(chan struct{}), make(chan struct{})
	w := newWriter(path, func(err error) { t.Error(err) }, func(p string, data []byte) error {
		// The first write waits until every save is queued, which makes
		// the coalescing certain instead of a matter of timing.
		if writes.Add(1) == 1 {
			close(stalled)
			<-stall
		}
		return WriteAtomic(p, data)
	})
	defer w.Close()

	// The saves are made while the first write is stalled, which lasts
	// until they are all made: a Save that blocked would never return.
	var mu sync.Mutex
	var order []int
	saved := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(saved)
		for i := range 100 {
			w.Save(fmt.Appendf(nil, "save %d", i), func(error) {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
			if i == 0 {
				<-stalled
			}
		}
	}()
	select {
	case <-saved:
		t.Logf("100 saves took %v", time.Since(start))
	case <-time.After(testwait.Hang):
		close(stall)
		t.Fatalf("100 saves were not made in %v: Save blocked", testwait.Hang)
	}
	close(stall)
	w.Close()

	if got, _ := os.ReadFile(path); string(got) != "save 99" {
		t.Errorf("file holds %q, want the last save", got)
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("%d writes, want 2 (the first, then the last of the 99 queued behind it)", n)
	}
	if !slices.Equal(order, seq(100)) {
		t.Errorf("done funcs called as %v, want each once in order", order)
	}
}

func TestWriterCoalescesRealDisk(t *testing.T) {
	// The same without a stalled write: whatever the timing, the file ends
	// with the last data and every done is called once, in order.
	path := filepath.Join(t.TempDir(), "x.json")
	w := NewWriter(path, func(err error) { t.Error(err) })
	var order []int // appended only from the writer's goroutine
	for i := range 100 {
		w.Save(mustMarshal(t, file(fmt.Sprint(i), 20, 200)), func(error) { order = append(order, i) })
	}
	w.Close()
	f, err := Load(path)
	if err != nil || f.ID != "99" {
		t.Fatalf("Load = %v, %v; want session 99", f, err)
	}
	if !slices.Equal(order, seq(100)) {
		t.Errorf("done funcs called as %v", order)
	}
}

func TestWriterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.json")
	w := NewWriter(path, nil)
	var called atomic.Int32
	w.Save([]byte("one"), nil)
	w.Save([]byte("two"), func(error) { called.Add(1) })
	w.Close()
	if got, _ := os.ReadFile(path); string(got) != "two" {
		t.Errorf("Close did not flush: file holds %q", got)
	}
	if called.Load() != 1 {
		t.Errorf("done called %d times before Close returned", called.Load())
	}
	select {
	case <-w.Done():
	default:
		t.Error("Done is not closed after Close")
	}
	w.Close() // idempotent

	// After Close, Save writes nothing and calls done at once.
	w.Save([]byte("three"), func(error) { called.Add(1) })
	if called.Load() != 2 {
		t.Error("Save after Close did not call done at once")
	}
	w.Save([]byte("four"), nil)
	if got, _ := os.ReadFile(path); string(got) != "two" {
		t.Errorf("Save after Close wrote: file holds %q", got)
	}

	// Concurrent Close calls all return once the goroutine is gone.
	w = NewWriter(filepath.Join(t.TempDir(), "y.json"), nil)
	w.Save([]byte("y"), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(w.Close)
	}
	wg.Wait()
	<-w.Done()
}

func TestWriterError(t *testing.T) {
	// A path under a regular file can never be written.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var errs []error // appended only from the writer's goroutine
	w := NewWriter(filepath.Join(blocker, "sessions", "x.json"), func(err error) { errs = append(errs, err) })
	done := make(chan struct{})
	w.Save([]byte("x"), func(error) { close(done) })
	<-done
	w.Close()
	if len(errs) != 1 {
		t.Fatalf("onError called with %v, want one error", errs)
	}
	t.Log(errs[0])
}

func TestWriterConcurrentSaves(t *testing.T) {
	// Save is safe from any goroutine; run with -race.
	path := filepath.Join(t.TempDir(), "x.json")
	w := NewWriter(path, func(err error) { t.Error(err) })
	var wg sync.WaitGroup
	var calls atomic.Int32
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				w.Save(fmt.Appendf(nil, "%d-%d", g, i), func(error) { calls.Add(1) })
			}
		})
	}
	wg.Wait()
	w.Close()
	if calls.Load() != 100 {
		t.Errorf("%d done calls, want 100", calls.Load())
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
