package grains

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/protocol"
)

// A link is a client connection's end on a node that runs some of its
// sessions, the connection itself being on another node (or on this one:
// a connection reaches every session through its grain, wherever the
// cluster placed it). It is the client as those sessions know it — a
// protocol.Caller, whose owner the client's calls prove (made with the
// owner's token, checked here: proof.go), and whose roots are this node's
// own (serve.roots) —
// and the way back to the client: what the sessions write goes to the
// client's edge (its PID) as typed Out items, in each session's order,
// through the link's queue, which its actor sends as one Outs at a time
// (actors sending to one actor keep their order, on a node and across
// nodes); the link's actor also takes what comes back: the client's
// answers to the sessions' questions, the credits of the output the edge
// has written, the markers it has reached, and the client's end.
type link struct {
	h   *Host
	key string
	// owner is the client's, and k the key of its connection: what the
	// client's edge sends here carries a proof made with it, and so does
	// what goes back (proof.go).
	owner string
	k     *secret

	edge *actor.PID // the client's edge (edgeProcess)
	// local is that edge's connection when it is in this process: what
	// the sessions write is handed to it there and then, in their order
	// (send), with no message, proof or actor between; nil for a client
	// on another node.
	local *edgeConn
	sys   *actor.ActorSystem
	self  *actor.PID
	me    *grainspb.Conn // self, as the edge names it
	node  string
	c     *protocol.Caller
	// forms says whether the client shows forms, as its last call said.
	forms atomic.Bool
	caps  atomic.Uint32 // the client's session capabilities (actors.Caps), as its last call said

	mu     sync.Mutex
	closed bool
	// gone is closed with the link: the sessions' questions waiting for
	// the client fail (ask).
	gone chan struct{}
	// debts are, by session, the budget its streamed output goes back to
	// and the bytes of it on their way to the client: given back as the
	// edge's credits come, or all at once when the link closes (a client
	// that is gone writes nothing more).
	debts map[string]*debt
	// delivers are the messages to send once the edge has written what
	// came before them (Outbox.Deliver), by number. The sessions'
	// questions to the client wait each in an actor of its own (ask).
	delivers map[uint64]delivery
	next     uint64
	// outs are what the sessions wrote since the link's last Outs, in
	// their order; flushing says that the link's actor has a flushOuts
	// on its way, which sends them (at most outsBytes in one).
	outs     []*grainspb.Out
	flushing bool
	once     sync.Once
	// stream is where the edge's node takes its Outs straight (Conn.stream,
	// on a member's host: Member.trustedStream; stream.go), and via the
	// connection there. A link sends all its Outs one way, so that none
	// overtakes another: dialing says the connection is being dialed
	// (newLink starts it), and what the sessions write waits in outs
	// until streamDialed says whether it is up (via). A link whose via is
	// nil sends through the remote for its life: it had no stream, its
	// dial failed, or its connection broke. The link's actor alone reads
	// and writes via and dialing once it is spawned.
	stream  string
	via     *streamPeer
	dialing bool
}

// streamDialed tells a link's actor that the dial newLink started has
// ended: it never leaves the process.
type streamDialed struct{}

// flushOuts tells the link's actor to send what its sessions wrote: it
// never leaves the process.
type flushOuts struct{}

// outsBytes bounds what one Outs carries (about: the items' own bytes),
// well under gRPC's largest message; an item larger than it goes alone.
const outsBytes = 1 << 20

type debt struct {
	b     *actors.Budget
	bytes int64
}

type delivery struct {
	to  *actor.PID
	msg any
}

// newLink makes the link of the client connection call comes from, whose
// key is k, with its actor and its Caller on hub.
func (h *Host) newLink(sys *actor.ActorSystem, key string, k *secret, call *grainspb.Call) *link {
	l := &link{h: h, key: key, owner: call.Owner, k: k, edge: actor.NewPID(call.Conn.Address, call.Conn.Id), sys: sys, node: sys.Address(),
		debts: map[string]*debt{}, delivers: map[uint64]delivery{}, gone: make(chan struct{})}
	if call.Conn.Address == sys.Address() && h.m != nil {
		if c, ok := h.m.edges.Load(call.Conn.Id); ok && c.(*edgeConn).owner == call.Owner {
			l.local = c.(*edgeConn)
		}
	}
	var s *stream
	if l.local == nil && h.m != nil && h.m.stream != nil {
		s, l.stream = h.m.stream, h.m.trustedStream(call.Conn.Address, call.Conn.Stream)
	}
	if l.stream != "" {
		l.via = s.peerNow(l.stream)
		l.dialing = l.via == nil
	}
	l.self = sys.Root.Spawn(h.hub.Runtime().Props(l.receive))
	if l.dialing {
		// The dial's wait is this goroutine's, not the actor's: what the
		// sessions write waits in outs meanwhile (at most streamDial).
		go func() {
			_, _ = s.peer(l.stream)
			sys.Root.Send(l.self, streamDialed{})
		}()
	}
	l.me = &grainspb.Conn{Address: l.self.Address, Id: l.self.Id}
	l.c = h.hub.NewCaller(protocol.CallerOptions{
		Log: h.log, Owner: call.Owner, Roots: h.roots, Node: l.node,
		Link: l, Asks: protocol.NewClient(l.ask, l.forms.Load, func() actors.Caps { return actors.Caps(l.caps.Load()) }),
	})
	return l
}

// receive takes what the client's edge sends back; it never waits.
// Nothing is taken whose proof does not check with the connection's key.
func (l *link) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *grainspb.Answer, *grainspb.Credit, *grainspb.Delivered, *grainspb.Gone:
		// An answer goes to the actor its question made (ask): one here
		// is taken by nothing, and refused if forged.
		if !l.k.checks(ctx.Self(), m.(proto.Message)) {
			l.h.refused.say(fmt.Sprintf("a %T for the link of %s's connection %s: its proof does not check (made without the key of the connection)", m, l.owner, l.edge))
			return
		}
	}
	switch m := ctx.Message().(type) {
	case *grainspb.Credit:
		l.mu.Lock()
		d := l.debts[m.SessionId]
		if d != nil {
			n := min(m.Bytes, d.bytes)
			d.bytes -= n
			d.b.Give(int(n))
			if d.bytes == 0 {
				delete(l.debts, m.SessionId) // a session's, while it streams
			}
		}
		l.mu.Unlock()
	case *grainspb.Delivered:
		l.mu.Lock()
		d, ok := l.delivers[m.Number]
		delete(l.delivers, m.Number)
		l.mu.Unlock()
		if ok {
			l.sys.Root.Send(d.to, d.msg)
		}
	case *grainspb.Gone:
		l.h.forget(l)
		go l.close()
	case flushOuts:
		l.flush(ctx)
	case streamDialed:
		l.dialing = false
		l.via = l.h.m.stream.peerNow(l.stream) // nil: its dial failed
		l.flush(ctx)
	}
}

// flush sends what the sessions wrote since the last flush to the
// client's edge, in their order, in as few Outs as fit outsBytes.
func (l *link) flush(ctx actor.Context) {
	l.mu.Lock()
	outs := l.outs
	if l.dialing {
		// They wait for streamDialed, which flushes them.
		l.flushing = false
		l.mu.Unlock()
		return
	}
	l.outs, l.flushing = nil, false
	l.mu.Unlock()
	for len(outs) > 0 {
		n, size := 1, outSize(outs[0])
		for n < len(outs) && size+outSize(outs[n]) <= outsBytes {
			size += outSize(outs[n])
			n++
		}
		m := &grainspb.Outs{Link: l.me, Node: l.node, Items: outs[:n:n]}
		m.Proof = l.k.prove(l.edge, m)
		if p := l.via; p != nil {
			if err := p.send(streamOuts, l.edge.Id, m); err == nil {
				outs = outs[n:]
				continue
			}
			// The connection broke (what it had not written is lost,
			// as what the remote had queued for a member it lost), or
			// this Outs is larger than a frame: this and the rest go
			// through the remote.
			l.via = nil
		}
		ctx.Send(l.edge, m)
		outs = outs[n:]
	}
}

// outSize is about the bytes o takes in an Outs.
func outSize(o *grainspb.Out) int {
	n := 64 + len(o.SessionId) + len(o.MessageId)
	switch it := o.Item.(type) {
	case *grainspb.Out_Chunk:
		n += len(it.Chunk)
	case *grainspb.Out_Thought:
		n += len(it.Thought)
	case *grainspb.Out_Update:
		n += len(it.Update)
	case *grainspb.Out_Usage:
		n += 16
	case *grainspb.Out_Response:
		n += len(it.Response.Result) + len(it.Response.Error.GetMessage()) + len(it.Response.Error.GetData())
	case *grainspb.Out_Ask:
		n += len(it.Ask.Params)
	}
	return n
}

// close ends the link: the client is gone. Its sessions' questions fail,
// what they had on the way is given back, and the sessions end their
// turns cancelled and stay live, detached.
func (l *link) close() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.gone)
		delivers := l.delivers
		l.delivers = map[uint64]delivery{}
		for _, d := range l.debts {
			d.b.Give(int(d.bytes))
			d.bytes = 0
		}
		l.mu.Unlock()
		for _, d := range delivers {
			l.sys.Root.Send(d.to, d.msg)
		}
		l.c.Close()
		l.sys.Root.Stop(l.self)
	})
}

// errLinkClosed fails a session's question once its client is gone.
var errLinkClosed = errors.New("the client's connection is closed")

// send puts one thing a session wrote in the link's next Outs, and has
// the link's actor send them unless it is about to.
func (l *link) send(sid string, out *grainspb.Out) {
	out.SessionId = sid
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return // the client is gone, and so is the link's actor
	}
	if c := l.local; c != nil {
		// Under the link's lock, so that the items keep the order of
		// the calls, as in the queue.
		if !c.stopped.Load() {
			c.out(l.self, !c.e.m.isMember(l.node), out)
		}
		l.mu.Unlock()
		return
	}
	l.outs = append(l.outs, out)
	first := !l.flushing
	l.flushing = true
	l.mu.Unlock()
	if first {
		l.sys.Root.Send(l.self, flushOuts{})
	}
}

// The sessions' Outbox (protocol.Link).

func (l *link) Update(sid string, u acp.SessionUpdate) { l.Stream(sid, u, nil, 0) }

// UpdateRaw sends an update encoded here already (a notice).
func (l *link) UpdateRaw(sid string, raw json.RawMessage) {
	l.send(sid, &grainspb.Out{Item: &grainspb.Out_Update{Update: raw}})
}

func (l *link) Stream(sid string, u acp.SessionUpdate, b *actors.Budget, n int) {
	out := &grainspb.Out{Cost: int64(n)}
	text, id, thought, plain := protocol.PlainChunk(&u)
	switch {
	case u.UsageUpdate != nil && u.UsageUpdate.Meta == nil && u.UsageUpdate.Cost == nil:
		out.Item = &grainspb.Out_Usage{Usage: &grainspb.Usage{Used: int64(u.UsageUpdate.Used), Size: int64(u.UsageUpdate.Size)}}
	case plain && thought:
		out.Item, out.MessageId = &grainspb.Out_Thought{Thought: text}, id
	case plain:
		out.Item, out.MessageId = &grainspb.Out_Chunk{Chunk: text}, id
	default:
		raw, err := protocol.MarshalUpdate(&u)
		if err != nil {
			l.h.log.Error(fmt.Sprintf("cluster: an update of session %s could not be encoded: %v", sid, err))
			b.Give(n)
			return
		}
		out.Item = &grainspb.Out_Update{Update: raw}
	}
	if b != nil && n > 0 {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			b.Give(n)
			return
		}
		d := l.debts[sid]
		if d == nil || d.b != b {
			d = &debt{b: b}
			l.debts[sid] = d
		}
		d.bytes += int64(n)
		l.mu.Unlock()
	}
	l.send(sid, out)
}

// accepted tells the client's edge that the session took the call of
// seq it sent straight to its actor, ahead of what the session writes.
func (l *link) accepted(sid string, seq uint64) {
	l.send(sid, &grainspb.Out{Item: &grainspb.Out_Accepted{Accepted: seq}})
}

func (l *link) Deliver(sid string, pid *actor.PID, msg any) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.sys.Root.Send(pid, msg)
		return
	}
	l.next++
	k := l.next
	l.delivers[k] = delivery{to: pid, msg: msg}
	l.mu.Unlock()
	l.send(sid, &grainspb.Out{Item: &grainspb.Out_Deliver{Deliver: k}})
}

func (l *link) Answer(sid string, r actors.Reply, result any, rerr *acp.RequestError) {
	resp := &grainspb.Response{Id: idBytes(r.ID)}
	if rerr == nil {
		b, err := protocol.MarshalAnswer(result)
		if err != nil || result == nil {
			if err != nil {
				l.h.log.Error(fmt.Sprintf("cluster: the answer to %s could not be encoded: %v", r.Method, err))
			}
			b = []byte("{}")
		}
		resp.Result = b
	} else {
		resp.Error = wireError(rerr)
	}
	l.send(sid, &grainspb.Out{Item: &grainspb.Out_Response{Response: resp}})
}

// ask sends one of a session's questions to the client through its edge
// and waits for the answer, or ctx: then the edge is told (Abandon), and
// tells the client.
func (l *link) ask(ctx context.Context, sid, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, errLinkClosed
	}
	// The answer comes to an actor of the question's own, which takes it
	// only with the connection's proof made for it: no table of waiters.
	ch := make(chan *grainspb.Answer, 1)
	waiter := l.sys.Root.Spawn(l.h.hub.Runtime().Props(func(ctx actor.Context) {
		m, ok := ctx.Message().(*grainspb.Answer)
		if !ok {
			return
		}
		if !l.k.checks(ctx.Self(), m) {
			l.h.refused.say(fmt.Sprintf("an Answer for a question of %s's connection %s: its proof does not check (made without the key of the connection)", l.owner, l.edge))
			return
		}
		select {
		case ch <- m:
		default: // answered already
		}
	}))
	defer l.sys.Root.Stop(waiter)
	me := &grainspb.Conn{Address: waiter.Address, Id: waiter.Id}
	l.send(sid, &grainspb.Out{Item: &grainspb.Out_Ask{Ask: &grainspb.Ask{ReplyTo: me, Method: method, Params: raw}}})
	select {
	case a := <-ch:
		switch {
		case a.Failed != "":
			return nil, errors.New(a.Failed)
		case a.Error != nil:
			return nil, requestError(a.Error)
		}
		return a.Result, nil
	case <-l.gone:
		return nil, errLinkClosed
	case <-ctx.Done():
		// Behind the question in the session's order, never ahead of it.
		l.send(sid, &grainspb.Out{Item: &grainspb.Out_Abandon{Abandon: me}})
		return nil, ctx.Err()
	}
}

// wireError is an ACP error as it crosses nodes; requestError takes it
// back.
func wireError(e *acp.RequestError) *grainspb.Error {
	e = protocol.Said(e) // its message says why before its data is JSON
	w := &grainspb.Error{Code: int32(e.Code), Message: e.Message}
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			w.Data = b
		}
	}
	return w
}

func requestError(w *grainspb.Error) *acp.RequestError {
	e := &acp.RequestError{Code: int(w.Code), Message: w.Message}
	if len(w.Data) > 0 {
		e.Data = json.RawMessage(w.Data)
	}
	return e
}
