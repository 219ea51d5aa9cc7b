package actors

import (
	"runtime"
	"sync"
	"time"
)

// dispatcher is the protoactor Dispatcher of a Runtime: it runs mailboxes
// on a few long-lived goroutines, one per core or so. Protoactor's own
// starts a goroutine each time a mailbox gets work, and under load the new
// stacks, grown again by every Receive, and the hand-offs between them cost
// mm's throughput: with protoactor's default dispatcher the standard
// mmstress run (1,000 sessions × 10 turns, concurrency 64) made 30% fewer
// turns per second over pipes (median of 7 alternated runs: 20,400 against
// 29,000) and 16% fewer in process (29,900 against 35,500, 11 runs). Over
// pipes is how editors run mm, so the custom dispatcher stays.
//
// A mailbox that never empties keeps its worker: protoactor's mailbox only
// yields to the Go scheduler every throughput messages, it does not return.
// So that busy mailboxes cannot keep the others waiting, a watchdog adds a
// worker whenever work has waited starved for a quantum while every worker
// was busy; the extra workers leave when they find nothing to do. Schedule
// never blocks: an actor that sends from its Receive never waits on the
// dispatcher. An idle worker already signalled is promised to the job that
// signalled it (woken): two jobs scheduled at once never both count on one
// worker while the watchdog sleeps (TestDispatcherTwoQuickJobs).
type dispatcher struct {
	mu    sync.Mutex
	cond  *sync.Cond
	queue []func()
	head  int
	idle  int
	// woken counts the idle workers signalled that have not woken yet:
	// each takes one job, so an idle worker is free for a new job only if
	// no earlier one was promised to it.
	woken   int
	workers int
	// taken counts the jobs workers have taken; the watchdog compares it
	// with what it was when it was armed.
	taken  uint64
	armed  bool
	timer  *time.Timer
	closed bool
	done   sync.WaitGroup
}

func newDispatcher() *dispatcher {
	d := &dispatcher{}
	d.cond = sync.NewCond(&d.mu)
	return d
}

const (
	// throughput is how many messages a mailbox handles before it yields.
	throughput = 300
	// starvation is how long work may wait while no worker takes any.
	starvation = 10 * time.Millisecond
)

// base is the number of workers kept.
func base() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

func (d *dispatcher) Throughput() int { return throughput }

func (d *dispatcher) Schedule(fn func()) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		go fn() // after shutdown, the last messages still run
		return
	}
	d.queue = append(d.queue, fn)
	switch {
	case d.idle > d.woken:
		d.woken++
		d.cond.Signal()
	case d.workers < base():
		d.spawn()
	case !d.armed:
		// Every worker is busy: if none takes work for a quantum, they
		// are held by mailboxes that do not empty.
		d.arm()
	}
	d.mu.Unlock()
}

// watch adds a worker if no job was taken since the watchdog was armed and
// work still waits; it stays armed while every worker is busy.
func (d *dispatcher) watch(seen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = false
	if d.closed || d.head == len(d.queue) || d.idle > d.woken {
		return
	}
	if d.taken == seen {
		d.spawn()
	}
	d.arm()
}

// arm starts the watchdog; d.mu is held.
func (d *dispatcher) arm() {
	d.armed = true
	seen := d.taken
	d.timer = time.AfterFunc(starvation, func() { d.watch(seen) })
}

// spawn starts a worker; d.mu is held.
func (d *dispatcher) spawn() {
	d.workers++
	d.done.Add(1)
	go d.work()
}

func (d *dispatcher) work() {
	defer d.done.Done()
	d.mu.Lock()
	for {
		for d.head == len(d.queue) && !d.closed && d.workers <= base() {
			d.idle++
			d.cond.Wait()
			d.idle--
			if d.woken > 0 {
				d.woken--
			}
		}
		if d.head == len(d.queue) {
			// Closed, or an extra worker with nothing left to do.
			d.workers--
			d.mu.Unlock()
			return
		}
		fn := d.queue[d.head]
		d.queue[d.head] = nil
		d.head++
		d.taken++
		if d.head == len(d.queue) {
			d.queue, d.head = d.queue[:0], 0
		}
		d.mu.Unlock()
		fn()
		d.mu.Lock()
	}
}

// close lets the workers finish the queue and exit, and waits for them.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	d.cond.Broadcast()
	d.done.Wait()
}
