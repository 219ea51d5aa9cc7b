package protocol

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// outbox is the one ordered writer of session updates (actors.Outbox). Its
// goroutine writes queued updates in order and delivers a queued reply only
// after everything queued before it is written.
type outbox struct {
	conn *acp.AgentSideConnection
	root *actor.RootContext

	mu     sync.Mutex
	cond   *sync.Cond
	items  []outItem
	spare  []outItem
	closed bool
	done   chan struct{}
}

type outItem struct {
	sessionID string
	update    acp.SessionUpdate
	to        *actor.PID
	msg       any
}

func newOutbox() *outbox {
	o := &outbox{done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *outbox) start(conn *acp.AgentSideConnection, root *actor.RootContext) {
	o.conn, o.root = conn, root
	go o.run()
}

func (o *outbox) Update(sessionID string, u acp.SessionUpdate) {
	o.push(outItem{sessionID: sessionID, update: u})
}

func (o *outbox) Deliver(pid *actor.PID, msg any) {
	o.push(outItem{to: pid, msg: msg})
}

func (o *outbox) push(it outItem) {
	o.mu.Lock()
	o.items = append(o.items, it)
	o.mu.Unlock()
	o.cond.Signal()
}

func (o *outbox) run() {
	defer close(o.done)
	ctx := context.Background()
	for {
		o.mu.Lock()
		for len(o.items) == 0 && !o.closed {
			o.cond.Wait()
		}
		if len(o.items) == 0 && o.closed {
			o.mu.Unlock()
			return
		}
		batch := o.items
		o.items = o.spare[:0]
		o.mu.Unlock()
		for i := range batch {
			it := &batch[i]
			if it.to != nil {
				o.root.Send(it.to, it.msg)
			} else {
				// A write error means the client is gone; the shutdown
				// path cancels the turns, so nothing is lost by going on.
				_ = o.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: acp.SessionId(it.sessionID), Update: it.update})
			}
			*it = outItem{}
		}
		o.mu.Lock()
		o.spare = batch[:0]
		o.mu.Unlock()
	}
}

// close writes what is queued, then stops the goroutine.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cond.Broadcast()
	<-o.done
}
