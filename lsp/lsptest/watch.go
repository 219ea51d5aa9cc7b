package lsptest

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// Watch measures what an attack costs the process that watches it: the
// peak growth of its live heap and the CPU time it spent, its children
// (the fake servers) excluded.
type Watch struct {
	start   time.Time
	cpu     time.Duration
	base    uint64
	guard   uint64
	over    func()
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	peak    uint64
	tripped bool
}

// WatchHeap starts a Watch. The heap is sampled every 5 ms; once it has
// grown by more than guard, over is called, once, so that a test can cut
// an unbounded attack off before it takes the machine down.
func WatchHeap(guard uint64, over func()) *Watch {
	runtime.GC()
	w := &Watch{start: time.Now(), cpu: cpuTime(), base: heapObjects(), guard: guard, over: over,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Watch) run() {
	defer close(w.done)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		h := heapObjects()
		w.mu.Lock()
		if h > w.base && h-w.base > w.peak {
			w.peak = h - w.base
		}
		trip := w.peak > w.guard && !w.tripped
		w.tripped = w.tripped || trip
		w.mu.Unlock()
		if trip {
			w.over()
		}
	}
}

// Stop ends the watch and returns the heap's peak growth, the time since
// the start, the CPU time spent meanwhile, and whether the guard tripped.
func (w *Watch) Stop() (peak uint64, took, cpu time.Duration, tripped bool) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, time.Since(w.start), cpuTime() - w.cpu, w.tripped
}

// heapObjects is the memory taken by heap objects, live or not yet swept:
// what an allocation adds to at once.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
