package protocol

import (
	"sync"
	"time"
)

// pending bounds the requests of a connection that were read and are not
// yet answered. The ingress takes a place for each request before serving
// it and waits while none is free: it stops reading, and the pipe pushes
// back on a client that writes requests faster than it reads their
// answers. A place is given back once the response is written (by the
// outbox, or by the SDK for the requests it serves). Notifications and
// responses take no place: they are served at once, or dropped.
//
// A client that sends more than max requests without answering the
// permission request one of them waits on waits for itself: mm reads the
// answer only after a place frees. Editors send a prompt or two at a time.
type pending struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
	max  int
	// answered counts the places given back, so that a wait for the last
	// answers can tell a client that reads from one that stopped.
	answered uint64
	closed   bool
}

func newPending(max int) *pending {
	p := &pending{max: max}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// take waits for a free place and takes it; after close it takes one at
// once. It gives up, false, once ended is closed (nil never is): the
// client's stream has ended, and the requests that hold the places may
// wait for an answer of the client's that will never be read.
func (p *pending) take(ended <-chan struct{}) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= p.max && !p.closed && ended != nil {
		// A cond has no select: the end wakes the wait.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-ended:
				p.mu.Lock()
				p.cond.Broadcast()
				p.mu.Unlock()
			case <-stop:
			}
		}()
	}
	for p.n >= p.max && !p.closed {
		select {
		case <-ended:
			return false
		default:
		}
		p.cond.Wait()
	}
	p.n++
	return true
}

// give gives back k places: their responses were written.
func (p *pending) give(k int) {
	if k == 0 {
		return
	}
	p.mu.Lock()
	p.n = max(0, p.n-k)
	p.answered += uint64(k)
	p.mu.Unlock()
	p.cond.Broadcast()
}

// count is the number of requests read and not answered.
func (p *pending) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// How a drain ended.
const (
	drainDone   = iota // every request read was answered
	drainStuck         // the client stopped reading
	drainSilent        // no answer came for the wait's hang bound
)

// drain waits until every request read has been answered. It gives up
// when stuck says the client has stopped reading, asked each time a
// second passes without an answer, or when no answer came for hang.
func (p *pending) drain(stuck func() bool, hang time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	quiet := time.Duration(0)
	for p.n > 0 {
		if p.waitProgress(p.answered, time.Second) {
			quiet = 0
			continue
		}
		if stuck() {
			return drainStuck
		}
		if quiet += time.Second; quiet >= hang {
			return drainSilent
		}
	}
	return drainDone
}

// waitProgress waits up to idle for an answer after seen; p.mu is held.
func (p *pending) waitProgress(seen uint64, idle time.Duration) bool {
	deadline := time.Now().Add(idle)
	for p.n > 0 && p.answered == seen {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.AfterFunc(left, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		p.cond.Wait()
		t.Stop()
	}
	return true
}

// close lets every take through: the connection is ending.
func (p *pending) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
}
