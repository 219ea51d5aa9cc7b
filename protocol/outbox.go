package protocol

import (
	"encoding/json"
	"hash/fnv"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// outbox is the ordered writer of everything sessions send (actors.Outbox)
// and of the responses that must reach the client in order with it: a
// prompt's response behind its turn's updates, a new session's response
// ahead of its available_commands_update. It has a few shards, each a
// goroutine owning a share of the sessions: a session's items go through
// one shard, in order; sessions on other shards neither wait for it nor
// make it wait. Each shard encodes with encoding/json and the SDK's types,
// and writes what queued while it wrote in one write.
//
// Its queues are bounded by what feeds them: streamed output by each
// session's Budget (given back here once written), everything else by the
// prompts, tool calls and requests it answers.
type outbox struct {
	shards []*shard
	// rpc is the connection: its table of the client's requests in flight
	// says which an answer may still answer (each is answered once; an
	// answer to a request not there, answered already or another
	// connection's, is dropped), and its writer takes what is written.
	rpc *jsonrpc.Conn
	// encode turns an answer into its ACP result or error (answers.go).
	encode func(string, actors.Reply, any) (any, *acp.RequestError)
	// written is told how many responses to the client's requests each
	// write carried.
	written func(n int)
}

func newOutbox(rpc *jsonrpc.Conn, log *slog.Logger) *outbox {
	n := max(2, runtime.GOMAXPROCS(0))
	o := &outbox{shards: make([]*shard, n), rpc: rpc, written: func(int) {}}
	for i := range o.shards {
		s := &shard{log: log, box: o, done: make(chan struct{}), started: make(chan struct{})}
		s.cond = sync.NewCond(&s.mu)
		o.shards[i] = s
		go s.run()
	}
	return o
}

// setRoot lets the shards deliver to actors; items queued before wait.
func (o *outbox) setRoot(root *actor.RootContext) {
	for _, s := range o.shards {
		s.root = root
		close(s.started)
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

func (o *outbox) Stream(sessionID string, u acp.SessionUpdate, b *actors.Budget, n int) {
	o.stream(sessionID, u, b, n)
}

// stream is Stream with whatever takes the bytes back (Sink.Chunk).
func (o *outbox) stream(sessionID string, u acp.SessionUpdate, paid Giver, n int) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, update: u, budget: paid, cost: n})
}

// updateRaw queues a session/update whose update member is raw JSON,
// written as it is (encoded where the session runs: Sink.Update); paid,
// when set, takes back n bytes once it is written.
func (o *outbox) updateRaw(sessionID string, raw json.RawMessage, paid Giver, n int) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, raw: raw, budget: paid, cost: n})
}

// UpdateRaw queues a session/update whose update member is raw JSON.
func (o *outbox) UpdateRaw(sessionID string, update json.RawMessage) {
	o.updateRaw(sessionID, update, nil, 0)
}

func (o *outbox) Deliver(sessionID string, pid *actor.PID, msg any) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, to: pid, msg: msg})
}

// Answer queues the answer to r behind the session's updates, once: the
// request leaves the connection's table now, and an answer to a request
// not there (answered already, another connection's) is dropped.
func (o *outbox) Answer(sessionID string, r actors.Reply, res any) {
	in, ok := o.rpc.TakeSeq(r.ID, r.Seq)
	if !ok {
		return
	}
	o.shard(sessionID).push(outItem{sessionID: sessionID, reply: r, answer: true, res: res, in: in})
}

// Request queues a request (or, with no id, a notification) of mm's own
// for the client behind everything queued for the session so far.
func (o *outbox) Request(sessionID string, id jsonrpc.ID, method string, params any) {
	o.shard(sessionID).push(outItem{sessionID: sessionID, request: &request{id: id, method: method, params: params}})
}

// closeWithin writes what is queued, then stops the shards. It reports
// whether that finished within d; if not, a shard blocked on a write is
// left to end when its write does.
func (o *outbox) closeWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	return o.closeUnless(func() bool { return !time.Now().Before(deadline) })
}

// closeUnless writes what is queued, then stops the shards, unless giveUp,
// asked every tenth of a second while a shard still writes, says to stop
// waiting. It reports whether every shard finished; a shard blocked on a
// write is left to end when its write does.
func (o *outbox) closeUnless(giveUp func() bool) bool {
	for _, s := range o.shards {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cond.Broadcast()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, s := range o.shards {
		for done := false; !done; {
			select {
			case <-s.done:
				done = true
			case <-tick.C:
				if giveUp() {
					return false
				}
			}
		}
	}
	return true
}

// request is a request (or notification) of mm's own for the client.
type request struct {
	id     jsonrpc.ID
	method string
	params any
}

// shard is one writer goroutine and its queue.
type shard struct {
	log     *slog.Logger
	box     *outbox
	root    *actor.RootContext
	started chan struct{} // closed once root is set

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
	// raw, when set, is the update's JSON, made elsewhere (updateRaw).
	raw    json.RawMessage
	budget Giver
	cost   int
	to     *actor.PID
	msg    any
	// reply and res are the answer to a request (Answer), when answer;
	// in is what the connection kept of the request.
	reply  actors.Reply
	answer bool
	res    any
	in     jsonrpc.Incoming
	// request is a request of mm's own (Request).
	request *request
}

func (it *outItem) isUpdate() bool {
	return it.to == nil && !it.answer && it.request == nil && it.raw == nil
}

func (s *shard) push(it outItem) {
	s.mu.Lock()
	s.items = append(s.items, it)
	s.mu.Unlock()
	s.cond.Signal()
}

func (s *shard) run() {
	defer close(s.done)
	var buf batch
	var paid []outItem // updates whose bytes go back to a budget once written
	responses := 0     // responses to the client's requests in buf
	for {
		s.mu.Lock()
		for len(s.items) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.items) == 0 && s.closed {
			s.mu.Unlock()
			return
		}
		batch := s.items
		s.items = s.spare[:0]
		s.mu.Unlock()
		// A batch is what queued while the last one was written: under
		// load it is large, and it goes out in one write. A session's
		// adjacent chunks are folded into one notification.
		buf.reset()
		for i := 0; i < len(batch); i++ {
			it := &batch[i]
			switch {
			case it.to != nil:
				// Everything before the message is written first.
				s.flush(&buf, &paid, &responses)
				<-s.started
				s.root.Send(it.to, it.msg)
				continue
			case it.answer:
				s.appendAnswer(&buf, it)
				responses++
				continue
			case it.request != nil:
				s.appendRequest(&buf, it.sessionID, it.request.id, it.request.method, it.request.params)
				continue
			case it.raw != nil:
				if it.budget != nil {
					paid = append(paid, *it)
				}
				s.appendRequest(&buf, it.sessionID, jsonrpc.ID{}, acp.ClientMethodSessionUpdate,
					sessionNotification{SessionID: it.sessionID, Update: it.raw})
				continue
			}
			j := i + 1
			for j < len(batch) && batch[j].isUpdate() && batch[j].sessionID == it.sessionID && mergeable(&it.update, &batch[j].update) {
				j++
			}
			for k := i; k < j; k++ {
				if batch[k].budget != nil {
					paid = append(paid, batch[k])
				}
			}
			if j > i+1 {
				mergeRun(batch[i:j])
				i = j - 1
			}
			s.appendRequest(&buf, it.sessionID, jsonrpc.ID{}, acp.ClientMethodSessionUpdate, notification(it.sessionID, &it.update))
		}
		s.flush(&buf, &paid, &responses)
		clear(batch)
		s.mu.Lock()
		s.spare = batch[:0]
		s.mu.Unlock()
	}
}

// batch is what a shard writes in one write: the messages' bytes one after
// another, and each message with what its transport needs to know of it.
type batch struct {
	data []byte
	outs []jsonrpc.Out
	ends []int // where each message's bytes end in data
	// scratch holds the params or result a fast encoder made (fast.go),
	// reused from message to message.
	scratch []byte
}

func (b *batch) reset() {
	b.data, b.outs, b.ends = b.data[:0], b.outs[:0], b.ends[:0]
}

// add records the message whose bytes were just appended to data.
func (b *batch) add(o jsonrpc.Out) {
	b.outs = append(b.outs, o)
	b.ends = append(b.ends, len(b.data))
}

// appendAnswer encodes the response to a request a session or the edge
// answered (jsonrpc's encoder: the one place a response is made).
func (s *shard) appendAnswer(b *batch, it *outItem) {
	result, rerr := s.box.encode(it.sessionID, it.reply, it.res)
	if raw, ok := appendResult(b.scratch[:0], result, rerr); ok && !it.reply.ID.IsZero() {
		b.scratch = raw
		b.data = jsonrpc.AppendResult(b.data, it.reply.ID, raw)
		b.add(jsonrpc.Out{Response: true, ID: it.reply.ID, Session: it.in.Session, Tag: it.in.Tag, Method: it.reply.Method})
		return
	}
	data, err := jsonrpc.EncodeResponse(it.reply.ID, result, rerr)
	if err != nil {
		s.log.Error("encoding a message for the client: " + err.Error())
		data, _ = jsonrpc.EncodeResponse(it.reply.ID, nil, jsonrpc.Internal("mm could not encode its answer: "+err.Error(), nil))
	}
	b.data = append(b.data, data...)
	b.add(jsonrpc.Out{Response: true, ID: it.reply.ID, Session: it.in.Session, Tag: it.in.Tag, Method: it.reply.Method})
}

// appendRequest encodes a request (id set) or a notification of mm's. One
// whose params cannot be encoded is dropped, logged (a request of mm's then
// waits until its caller gives up).
func (s *shard) appendRequest(b *batch, sessionID string, id jsonrpc.ID, method string, params any) {
	if n, ok := params.(sessionNotification); ok {
		if raw, ok := n.appendJSON(b.scratch[:0]); ok {
			b.scratch = raw
			b.data = jsonrpc.AppendRequest(b.data, id, method, raw, true)
			b.add(jsonrpc.Out{ID: id, Session: sessionID, Method: method})
			return
		}
	}
	data, err := jsonrpc.EncodeRequest(id, method, params)
	if err != nil {
		s.log.Error("encoding a message for the client: " + err.Error())
		return
	}
	b.data = append(b.data, data...)
	b.add(jsonrpc.Out{ID: id, Session: sessionID, Method: method})
}

// flush writes the encoded messages, then gives their bytes back to the
// sessions' budgets. A write error means the client is gone; the shutdown
// path cancels the turns, so nothing is lost by going on.
func (s *shard) flush(b *batch, paid *[]outItem, responses *int) {
	if len(b.outs) > 0 {
		start := 0
		for i := range b.outs {
			b.outs[i].Data = b.data[start:b.ends[i]]
			start = b.ends[i]
		}
		_ = s.box.rpc.WriteBatch(b.outs)
	}
	s.box.written(*responses)
	*responses = 0
	for _, it := range *paid {
		it.budget.Give(it.cost)
	}
	clear(*paid)
	*paid = (*paid)[:0]
	clear(b.outs)
	if cap(b.data) > 1<<20 {
		b.data = nil // one burst must not pin a large buffer
	}
	b.reset()
}

// mergeable says whether next can be folded into prev, for the same
// session with nothing of that session between them: text chunks of the
// same kind concatenate, and a usage_update supersedes the one before.
func mergeable(prev, next *acp.SessionUpdate) bool {
	switch {
	case prev.AgentMessageChunk != nil && next.AgentMessageChunk != nil:
		return plainChunk(prev.AgentMessageChunk.Meta, prev.AgentMessageChunk.Content) &&
			plainChunk(next.AgentMessageChunk.Meta, next.AgentMessageChunk.Content) &&
			sameID(prev.AgentMessageChunk.MessageId, next.AgentMessageChunk.MessageId)
	case prev.AgentThoughtChunk != nil && next.AgentThoughtChunk != nil:
		return plainChunk(prev.AgentThoughtChunk.Meta, prev.AgentThoughtChunk.Content) &&
			plainChunk(next.AgentThoughtChunk.Meta, next.AgentThoughtChunk.Content) &&
			sameID(prev.AgentThoughtChunk.MessageId, next.AgentThoughtChunk.MessageId)
	case prev.UsageUpdate != nil && next.UsageUpdate != nil:
		return prev.UsageUpdate.Meta == nil && next.UsageUpdate.Meta == nil
	}
	return false
}

// PlainChunk reports an update that is a chunk of text and nothing else
// but the id of the message it is part of (none when id is ""): an
// agent_message_chunk, or with thought an agent_thought_chunk. Every turn
// streams them: the outbox encodes and merges them on its fast path, and
// mm's nodes send them across as their text and id (package grains).
func PlainChunk(u *acp.SessionUpdate) (text, id string, thought, ok bool) {
	switch {
	case u.AgentMessageChunk != nil && plainChunk(u.AgentMessageChunk.Meta, u.AgentMessageChunk.Content):
		return u.AgentMessageChunk.Content.Text.Text, deref(u.AgentMessageChunk.MessageId), false, true
	case u.AgentThoughtChunk != nil && plainChunk(u.AgentThoughtChunk.Meta, u.AgentThoughtChunk.Content):
		return u.AgentThoughtChunk.Content.Text.Text, deref(u.AgentThoughtChunk.MessageId), true, true
	}
	return "", "", false, false
}

// TextChunk is the plain chunk PlainChunk reads: text, of the message id
// unless id is "", a thought's when thought is set.
func TextChunk(text, id string, thought bool) acp.SessionUpdate {
	var mid *string
	if id != "" {
		mid = &id
	}
	if thought {
		return acp.SessionUpdate{AgentThoughtChunk: &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock(text), MessageId: mid}}
	}
	return acp.SessionUpdate{AgentMessageChunk: &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(text), MessageId: mid}}
}

func plainChunk(meta map[string]any, c acp.ContentBlock) bool {
	return meta == nil && c.Text != nil && c.Text.Meta == nil && c.Text.Annotations == nil
}

// sameID says whether two chunks are of the same message: both of none,
// or both of one id.
func sameID(a, b *string) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// mergeRun folds a run of mergeable updates of one session into its first:
// the texts concatenated with one allocation, or the last usage.
func mergeRun(run []outItem) {
	first := &run[0].update
	if first.UsageUpdate != nil {
		first.UsageUpdate = run[len(run)-1].update.UsageUpdate
		return
	}
	text := func(u *acp.SessionUpdate) string {
		if u.AgentMessageChunk != nil {
			return u.AgentMessageChunk.Content.Text.Text
		}
		return u.AgentThoughtChunk.Content.Text.Text
	}
	n := 0
	for i := range run {
		n += len(text(&run[i].update))
	}
	var b strings.Builder
	b.Grow(n)
	for i := range run {
		b.WriteString(text(&run[i].update))
	}
	if first.AgentMessageChunk != nil {
		first.AgentMessageChunk = &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(b.String()), MessageId: first.AgentMessageChunk.MessageId}
	} else {
		first.AgentThoughtChunk = &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock(b.String()), MessageId: first.AgentThoughtChunk.MessageId}
	}
}
