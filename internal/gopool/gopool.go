// Package gopool runs functions on goroutines kept from earlier ones.
//
// A goroutine that decodes JSON or matches a regexp grows its stack; a new
// goroutine per call pays for that growth every time (runtime.copystack
// was 8–18% of mm's CPU under load). A Cache keeps up to MaxIdle finished
// goroutines, stacks grown, for the next calls.
//
// Concurrency: Go and Close may be called from any goroutine; Go never
// blocks; after Close, Go still runs f, on a new goroutine (counted, so a
// Close still running waits for it too).
package gopool

import "sync"

// Cache is a set of reusable goroutines. Its zero value is ready to use.
type Cache struct {
	// MaxIdle bounds the goroutines kept waiting; 0 means 64.
	MaxIdle int

	mu     sync.Mutex
	idle   []chan func()
	closed bool
	// live counts the goroutines, idle or not; Close waits (ended) until
	// it is 0. A WaitGroup would not do: a Go after every goroutine ended
	// but while Close waits adds to a counter at zero during its Wait.
	live  int
	ended *sync.Cond
}

// Go runs f on an idle goroutine, or a new one.
func (c *Cache) Go(f func()) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 && !c.closed {
		ch := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		ch <- f
		return
	}
	c.live++
	c.mu.Unlock()
	go c.loop(f)
}

func (c *Cache) loop(f func()) {
	defer func() {
		c.mu.Lock()
		if c.live--; c.live == 0 && c.ended != nil {
			c.ended.Broadcast()
		}
		c.mu.Unlock()
	}()
	ch := make(chan func())
	max := c.MaxIdle
	if max == 0 {
		max = 64
	}
	for f != nil {
		f()
		c.mu.Lock()
		if c.closed || len(c.idle) >= max {
			c.mu.Unlock()
			return
		}
		c.idle = append(c.idle, ch)
		c.mu.Unlock()
		f = <-ch // nil once closed
	}
}

// Close ends the idle goroutines and waits for the running ones.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, ch := range idle {
		close(ch)
	}
	c.mu.Lock()
	if c.ended == nil {
		c.ended = sync.NewCond(&c.mu)
	}
	for c.live > 0 {
		c.ended.Wait()
	}
	c.mu.Unlock()
}
