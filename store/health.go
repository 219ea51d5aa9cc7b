package store

import (
	"context"
	"sync/atomic"
	"time"
)

// Health watches whether a backend can take saves (Backend.Ping), for a
// server's readiness: a node whose store is unreachable would answer turns
// it cannot keep, so it says it is not ready until the store is back.
type Health struct {
	ok   atomic.Bool
	stop context.CancelFunc
	done chan struct{}
}

// WatchHealth pings b every interval (each ping bounded by the interval,
// at least a second) until Stop, and calls changed, from its goroutine,
// with nil when the store becomes reachable again and with the reason when
// it stops being so. The store starts healthy: the caller opened it.
func WatchHealth(b Backend, interval time.Duration, changed func(err error)) *Health {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Health{stop: cancel, done: make(chan struct{})}
	h.ok.Store(true)
	go func() {
		defer close(h.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, max(interval, time.Second))
			err := b.Ping(pctx)
			pcancel()
			if ctx.Err() != nil {
				return
			}
			if was := h.ok.Swap(err == nil); was != (err == nil) && changed != nil {
				changed(err)
			}
		}
	}()
	return h
}

// OK says whether the last ping was answered.
func (h *Health) OK() bool { return h.ok.Load() }

// Stop ends the pings and waits for the goroutine.
func (h *Health) Stop() {
	h.stop()
	<-h.done
}
