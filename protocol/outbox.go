package protocol

import (
	"hash/fnv"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
)

// outbox writes session updates (actors.Outbox) through a few shards, each
// a goroutine owning a share of the sessions: a session's updates and
// replies go through one shard, in order, so a reply is delivered only after
// its session's updates are written; sessions on other shards neither wait
// for it nor make it wait (one writer for all made every reply queue behind
// every session's output under load).
type outbox struct {
	shards []*shard
}

func newOutbox() *outbox {
	n := max(2, runtime.GOMAXPROCS(0))
	o := &outbox{shards: make([]*shard, n)}
	for i := range o.shards {
		o.shards[i] = newShard()
	}
	return o
}

func (o *outbox) start(w io.Writer, log *slog.Logger, root *actor.RootContext) {
	for _, s := range o.shards {
		s.w, s.log, s.root = w, log, root
		go s.run()
	}
}

func (o *outbox) shard(sessionID string) *shard {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sessionID))
	return o.shards[h.Sum32()%uint32(len(o.shards))]
}

func (o *outbox) Update(sessionID string, u acp.SessionUpdate) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, update: u})
}

func (o *outbox) Deliver(sessionID string, pid *actor.PID, msg any) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, to: pid, msg: msg})
}

// Answer queues a prompt's response behind the session's updates; the
// shard encodes it into the batch they go out in.
func (o *outbox) Answer(sessionID string, r *actors.Reply, res *actors.TurnResult) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, reply: r, res: res})
}

// closeWithin writes what is queued, then stops the shards. It reports
// whether that finished within d; if not, a shard blocked on a write is
// left to end when its write does.
func (o *outbox) closeWithin(d time.Duration) bool {
	deadline := time.After(d)
	for _, s := range o.shards {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cond.Broadcast()
	}
	for _, s := range o.shards {
		select {
		case <-s.done:
		case <-deadline:
			return false
		}
	}
	return true
}

// shard is one writer goroutine and its queue.
type shard struct {
	w    io.Writer // stdout, shared with the SDK's writes
	log  *slog.Logger
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
	// reply and res are a prompt's response (Answer).
	reply *actors.Reply
	res   *actors.TurnResult
}

func (it *outItem) isUpdate() bool { return it.to == nil && it.reply == nil }

func newShard() *shard {
	s := &shard{done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (o *shard) push(it outItem) {
	o.mu.Lock()
	o.items = append(o.items, it)
	o.mu.Unlock()
	o.cond.Signal()
}

func (o *shard) run() {
	defer close(o.done)
	var buf []byte
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
		// A batch is what queued while the last one was written: under
		// load it is large, and it goes out in one write. A session's
		// adjacent chunks are folded into one notification.
		buf = buf[:0]
		for i := 0; i < len(batch); i++ {
			it := &batch[i]
			if it.to != nil {
				// Everything before the reply is written first.
				buf = o.flush(buf)
				o.root.Send(it.to, it.msg)
				continue
			}
			if it.reply != nil {
				buf = appendTurnResult(buf, it.reply.ID, it.res)
				continue
			}
			j := i + 1
			for j < len(batch) && batch[j].isUpdate() && batch[j].sessionID == it.sessionID && mergeable(&it.update, &batch[j].update) {
				j++
			}
			if j > i+1 {
				mergeRun(batch[i:j])
				i = j - 1
			}
			var err error
			if buf, err = appendUpdate(buf, it.sessionID, &it.update); err != nil {
				o.log.Error("encoding a session update: " + err.Error())
			}
		}
		buf = o.flush(buf)
		clear(batch)
		o.mu.Lock()
		o.spare = batch[:0]
		o.mu.Unlock()
	}
}

// flush writes the encoded lines. A write error means the client is gone;
// the shutdown path cancels the turns, so nothing is lost by going on.
func (o *shard) flush(buf []byte) []byte {
	if len(buf) > 0 {
		_, _ = o.w.Write(buf)
	}
	if cap(buf) > 1<<20 {
		return nil // one burst must not pin a large buffer
	}
	return buf[:0]
}
