package actors

import (
	"runtime"
	"sync"
)

// pool is a protoactor Dispatcher that runs mailboxes on a fixed set of
// long-lived goroutines. Protoactor's default starts a new goroutine each
// time a mailbox gets work; under load that cost a new stack, grown again
// by every Receive (stack copying was 8% of the CPU in mmstress profiles).
// Schedule never blocks: the queue is unbounded, so an actor that sends
// from its Receive can never wait on a busy pool.
type pool struct {
	mu         sync.Mutex
	cond       *sync.Cond
	queue      []func()
	head       int
	idle       int
	workers    int
	max        int
	throughput int
	closed     bool
	done       sync.WaitGroup
}

func newPool(throughput int) *pool {
	p := &pool{max: max(8, 4*runtime.GOMAXPROCS(0)), throughput: throughput}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pool) Throughput() int { return p.throughput }

func (p *pool) Schedule(fn func()) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		go fn() // after shutdown, the last messages still run
		return
	}
	p.queue = append(p.queue, fn)
	switch {
	case p.idle > 0:
		p.cond.Signal()
	case p.workers < p.max:
		p.workers++
		p.done.Add(1)
		go p.work()
	}
	p.mu.Unlock()
}

func (p *pool) work() {
	defer p.done.Done()
	p.mu.Lock()
	for {
		for p.head == len(p.queue) && !p.closed {
			p.idle++
			p.cond.Wait()
			p.idle--
		}
		if p.head == len(p.queue) {
			p.workers--
			p.mu.Unlock()
			return
		}
		fn := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
		}
		p.mu.Unlock()
		fn()
		p.mu.Lock()
	}
}

// close lets the workers finish the queue and exit, and waits for them.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.done.Wait()
}
