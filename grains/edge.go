package grains

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acpmethod"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/protocol"
)

// NodeLost is the error of a request whose session's node was lost while
// it ran: the turn is gone, the session and its answered turns are not.
const NodeLost = "the node running this session was lost; the session's history is kept"

// Edge makes the Forwarders of the client connections this node holds:
// every request of a session goes to the session's grain, wherever the
// cluster placed it, and what the session writes comes back here.
type Edge struct {
	m   *Member
	hub *protocol.Hub
	// owners are this node's tokens: each connection's messages carry a
	// proof made with its owner's (proof.go).
	owners  *Owners
	log     *slog.Logger
	refused *refusals
	// budget is how long a call is tried before its request fails: long
	// enough for a lost node to leave the membership (failureTimeout) and
	// for a leaving one to drain.
	budget time.Duration

	mu    sync.Mutex
	conns map[*edgeConn]struct{}
}

// NewEdge makes the edge of member m, whose connections are hub's, of
// clients of owners' tokens; budget bounds how long a request is tried
// when its session's node cannot be reached.
func NewEdge(m *Member, hub *protocol.Hub, owners *Owners, budget time.Duration, log *slog.Logger) *Edge {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Edge{m: m, hub: hub, owners: owners, log: log, refused: &refusals{log: log}, budget: budget, conns: map[*edgeConn]struct{}{}}
	m.OnTopology(func(_, left []string) {
		if len(left) == 0 {
			return
		}
		e.mu.Lock()
		conns := make([]*edgeConn, 0, len(e.conns))
		for c := range e.conns {
			conns = append(conns, c)
		}
		e.mu.Unlock()
		for _, c := range conns {
			c.lost(left)
		}
	})
	return e
}

// Forwarder makes the Forwarder of a connection of owner (the name of the
// token it came with). The session's node takes the owner with the proof
// each call carries, made with that token, and the folders its sessions
// may be in from its own config. The connection's edge (its PID, an
// edgeProcess) has a name no other has had (random): its key, made of it,
// is its own.
func (e *Edge) Forwarder(owner string) protocol.NewForwarder {
	return func(sink protocol.Sink) protocol.Forwarder {
		c := &edgeConn{e: e, owner: owner, sink: sink,
			lanes: map[string]*lane{}, links: map[string]*actor.PID{},
			sessions: map[string]*actor.PID{}, owed: map[string]owed{}, changed: make(chan struct{})}
		self, fresh := e.m.System().ProcessRegistry.Add(edgeProcess{c}, "edge-"+rand.Text())
		if !fresh {
			// 26 random letters taken already: not in this universe.
			panic(fmt.Sprintf("grains: an edge's PID %s is taken", self.Id))
		}
		c.self = self
		c.me = &grainspb.Conn{Address: c.self.Address, Id: c.self.Id, Stream: e.m.streamAddr()}
		if c.k = e.owners.key(owner, c.me); c.k == nil {
			// The owner is the name of a token this node let in: its
			// token is here. Without it, every node refuses its calls.
			e.log.Error(fmt.Sprintf("cluster: no token of this node's names the owner %q of a connection: the other nodes will refuse its requests", owner))
		}
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		e.m.edges.Store(self.Id, c)
		return c
	}
}

// deliver sends call to its session's grain until one takes it, and
// returns the node that did; it gives up after the edge's budget. A try
// that failed is made again when the membership changes (the node that
// was leaving has left, another has joined), or after a pause that grows
// when nothing changes: what is waited for is an event, the pause bounds
// it.
func (e *Edge) deliver(call *grainspb.Call) (*grainspb.Accepted, error) {
	c := e.m.Cluster()
	deadline := time.Now().Add(e.budget)
	pause := 20 * time.Millisecond
	for {
		changed := e.m.Changed()
		start := time.Now()
		res, err := c.Request(call.SessionId, SessionKind, call, cluster.WithTimeout(2*time.Second))
		if a, ok := res.(*grainspb.Accepted); ok {
			if a.Refused != "" {
				// The node took nothing: sending it again changes nothing.
				return nil, refusal(a.Refused)
			}
			if !a.Again {
				if a.Node != e.m.Address() {
					e.m.CrossNodeRequest(time.Since(start), nil)
				}
				return a, nil
			}
			err = fmt.Errorf("its node (%s) is leaving", a.Node)
		} else if err == nil {
			err = fmt.Errorf("unexpected answer %T", res)
		}
		e.m.CrossNodeRequest(time.Since(start), err)
		if time.Now().After(deadline) {
			return nil, err
		}
		c.PidCache.Remove(call.SessionId, SessionKind)
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-changed:
		case <-t.C:
			pause = min(2*pause, 500*time.Millisecond)
		}
		t.Stop()
	}
}

// refusal is a node's refusal of a call (Accepted.Refused).
type refusal string

func (r refusal) Error() string { return string(r) }

// edgeConn is one client connection's Forwarder, and the actor the
// nodes that run its sessions send what they write to (Out), which it
// puts in the connection's own ordered outbox (protocol.Sink).
type edgeConn struct {
	e     *Edge
	owner string
	// k is the connection's key: what it sends to its sessions' nodes
	// carries a proof made with it, and so does what comes back.
	k    *secret
	sink protocol.Sink
	self *actor.PID
	me   *grainspb.Conn
	// stopped is set once the edge's PID is gone (Close): what a link of
	// this process would still hand it goes nowhere, as an Outs sent to
	// the PID does.
	stopped atomic.Bool
	// outsIn counts the Outs the edge took: what sessions on other
	// nodes wrote (a test's measure; links here hand theirs over).
	outsIn atomic.Int64

	mu       sync.Mutex
	seq      uint64
	lanes    map[string]*lane      // by session id
	links    map[string]*actor.PID // the client's link on every node that took a call, by key
	sessions map[string]*actor.PID // the session's actor, by session id, as the last call's Accepted named it
	closing  bool
	// owed is what was written of each session's stream and not given
	// back yet (owe), under owedMu: taken by the outbox's writers, never
	// under mu.
	owedMu sync.Mutex
	owed   map[string]owed
	// changed is closed, and replaced, when a lane ends its work or a
	// request is answered: what Close waits on (until).
	changed chan struct{}
	// taken counts the prompts sent straight that their node took, and
	// again those sent again through the cluster (under mu): what the
	// tests see of the way a prompt went.
	taken, again int
}

// signal wakes what waits in until (called under c.mu).
func (c *edgeConn) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// lane is one session's calls, sent in order, one at a time.
type lane struct {
	sid   string
	open  *grainspb.Open // what opened the session: its reopening elsewhere
	queue []*grainspb.Call
	busy  bool
	// ended is set once a close or a delete of the session was delivered:
	// the lane goes when it is empty (a connection opens and closes
	// sessions for as long as it lives).
	ended bool
	// straight is the prompt sent straight to the session's actor that
	// its node has not said it took yet: the lane sends nothing behind it
	// until it has (Out.accepted), or until it is sent again through the
	// cluster (lostStraight).
	straight *straightCall
}

// NewSessionID places a session the client opens (cluster.placement).
func (c *edgeConn) NewSessionID() string { return c.e.m.NewSessionID() }

func (c *edgeConn) Forward(sid string, r actors.Reply, p any, raw json.RawMessage) {
	call := &grainspb.Call{Conn: c.me, Owner: c.owner, Method: r.Method, Id: idBytes(r.ID), SessionId: sid, Forms: c.sink.Forms(), Caps: uint32(c.sink.Caps())}
	open, err := encodeParams(call, r.Method, p, raw)
	if err != nil {
		// Nothing the edge decoded fails here; if it did, its request
		// is answered, and goes nowhere.
		c.e.log.Error(fmt.Sprintf("cluster: %v", err))
		if !r.ID.IsZero() {
			c.sink.Answer(sid, r, nil, jsonrpc.Internal(err.Error(), nil))
		}
		return
	}
	c.mu.Lock()
	l := c.lanes[sid]
	if l == nil {
		l = &lane{sid: sid}
		c.lanes[sid] = l
	}
	if open != nil {
		l.open = open // what reopens the session where it goes
	}
	c.seq++
	call.Seq, call.Reopen = c.seq, l.open
	var req *request
	if !r.ID.IsZero() {
		req = &request{sid: sid, r: r}
		c.sink.Note(r, req)
	}
	if to := c.sessions[sid]; to != nil && req != nil && r.Method == acp.AgentMethodSessionPrompt &&
		!l.busy && len(l.queue) == 0 && l.straight == nil {
		// The lane is idle: the prompt goes straight from here, with no
		// goroutine of the lane's to wake for it (send does the same).
		msg := c.straightTo(to, call)
		c.goStraight(l, call, req, to)
		c.mu.Unlock()
		c.sendStraight(to, msg)
		return
	}
	call.Proof = c.k.prove(nil, call)
	l.queue = append(l.queue, call)
	start := !l.busy
	l.busy = true
	c.mu.Unlock()
	if start {
		go c.send(l)
	}
}

// send delivers a lane's calls in order until it is empty. A cancel whose
// session's actor is known goes straight to it, ahead of its mailbox
// (grainspb.Cancel): every call before it was accepted there.
func (c *edgeConn) send(l *lane) {
	root := c.e.m.System().Root
	for {
		c.mu.Lock()
		if len(l.queue) == 0 || l.straight != nil {
			// Nothing to send, or nothing until the prompt sent straight
			// is taken (acceptedStraight and lostStraight go on).
			l.busy = false
			c.signal()
			if len(l.queue) == 0 && l.straight == nil && l.ended && c.lanes[l.sid] == l {
				delete(c.lanes, l.sid)
				delete(c.sessions, l.sid)
				c.forgetOwed(l.sid)
			}
			c.mu.Unlock()
			return
		}
		call := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		to := c.sessions[call.SessionId]
		c.mu.Unlock()
		var r *request
		if id, ok := jsonrpc.IDOf(call.Id); ok && call.Id != nil {
			r = c.noted(id)
		}
		if to != nil && (call.Method == acp.AgentMethodSessionCancel || call.Method == acpmethod.CancelRequest) {
			m := &grainspb.Cancel{Conn: c.me, SessionId: call.SessionId, RequestId: requestIDOf(call)}
			m.Proof = c.k.prove(to, m)
			root.Send(to, m)
			continue
		}
		if to != nil && r != nil && call.Method == acp.AgentMethodSessionPrompt {
			// Its request runs on to's node once the node says it took
			// it (acceptedStraight), as a call through the cluster runs
			// there once Accepted: until then, a node that leaves has it
			// sent again, not failed (lost).
			msg := c.straightTo(to, call)
			c.mu.Lock()
			c.goStraight(l, call, r, to)
			c.mu.Unlock()
			c.sendStraight(to, msg)
			continue
		}
		a, err := c.e.deliver(call)
		c.mu.Lock()
		mine := r != nil && !r.done
		if err == nil {
			if mine {
				r.node = a.Node
			}
			if v := a.Link; v != nil {
				c.links[connKey(v)] = pidOf(v)
			}
			if v := a.Session; v != nil {
				c.sessions[call.SessionId] = pidOf(v)
				if at := c.e.m.trustedStream(v.Address, v.Stream); at != "" {
					c.e.m.streamAt.Store(v.Address, at)
				}
			}
			l.ended = call.Method == acp.AgentMethodSessionClose || call.Method == acp.AgentMethodSessionDelete
		}
		c.mu.Unlock()
		var refused refusal
		switch {
		case errors.As(err, &refused):
			c.e.log.Error(fmt.Sprintf("cluster: %s of session %s: %v", call.Method, call.SessionId, err))
			if mine {
				c.fail([]*request{r}, "cluster: "+err.Error())
			}
		case err != nil:
			c.e.log.Warn(fmt.Sprintf("cluster: %s of session %s could not reach its node: %v", call.Method, call.SessionId, err))
			if mine {
				c.fail([]*request{r}, fmt.Sprintf("cluster: the node of session %s could not be reached: %v", call.SessionId, err))
			}
		}
	}
}

// goOn starts lane l's sender if it has calls and none runs (c.mu held,
// and released).
func (c *edgeConn) goOn(l *lane) {
	start := !l.busy && len(l.queue) > 0
	if start {
		l.busy = true
	}
	c.signal()
	c.mu.Unlock()
	if start {
		go c.send(l)
	}
}

// lost fails the requests running on nodes that left the cluster, and
// ends the waits of their sessions' questions.
func (c *edgeConn) lost(left []string) {
	var lost []*request
	handed := c.handedOn()
	c.mu.Lock()
	for _, r := range handed {
		if r.node != "" && slices.Contains(left, r.node) {
			lost = append(lost, r)
		}
	}
	for key, pid := range c.links {
		if slices.Contains(left, pid.Address) {
			delete(c.links, key)
		}
	}
	for sid, pid := range c.sessions {
		if slices.Contains(left, pid.Address) {
			delete(c.sessions, sid)
		}
	}
	// A prompt sent straight to a node that left, which did not say it
	// took it, is sent again through the cluster, as a call through the
	// cluster that was not Accepted is tried again.
	type sent struct {
		l  *lane
		st *straightCall
	}
	var again []sent
	for _, l := range c.lanes {
		if st := l.straight; st != nil && slices.Contains(left, st.to.Address) {
			again = append(again, sent{l, st})
		}
	}
	c.mu.Unlock()
	for _, a := range again {
		c.lostStraight(a.l, a.st)
	}
	c.sink.Abandon(askedBy(nil, nil, left))
	if len(lost) > 0 {
		c.e.log.Warn(fmt.Sprintf("cluster: node %v lost with %d request(s) of a client in flight", left, len(lost)))
		c.fail(lost, NodeLost)
	}
}

func (c *edgeConn) CancelRequest(requestID jsonrpc.ID) bool {
	r := c.noted(requestID)
	if r == nil {
		return false
	}
	c.Forward(r.sid, actors.Reply{Method: acpmethod.CancelRequest}, cancelRequest{idBytes(r.r.ID)}, nil)
	return true
}

// idBytes is id as the JSON a Call carries, nil for none.
func idBytes(id jsonrpc.ID) []byte {
	if id.IsZero() {
		return nil
	}
	return id.AppendJSON(nil)
}

// Close tells every node serving the connection's sessions that its
// client is gone, once what was forwarded has been delivered, and waits
// until every request is answered, or wait.
func (c *edgeConn) Close(wait time.Duration) {
	deadline := time.Now().Add(wait)
	c.until(deadline, func() bool {
		for _, l := range c.lanes {
			// A lane whose calls wait behind a prompt sent straight goes
			// on once the prompt is taken.
			if l.busy || l.straight != nil && len(l.queue) > 0 {
				return false
			}
		}
		return true
	})
	c.mu.Lock()
	c.closing = true
	links := make([]*actor.PID, 0, len(c.links))
	for _, pid := range c.links {
		links = append(links, pid)
	}
	c.mu.Unlock()
	root := c.e.m.System().Root
	for _, pid := range links {
		m := &grainspb.Gone{Conn: c.me}
		m.Proof = c.k.prove(pid, m)
		root.Send(pid, m)
	}
	c.untilAnswered(deadline)
	c.e.m.edges.Delete(c.self.Id)
	c.stopped.Store(true)
	c.e.m.System().ProcessRegistry.Remove(c.self)
	c.sink.Abandon(askedBy(nil, nil, nil))
	c.e.mu.Lock()
	delete(c.e.conns, c)
	c.e.mu.Unlock()
}

// until waits until done (called under c.mu) or the deadline; it looks
// again each time the connection's state changes (signal), never on a
// clock.
func (c *edgeConn) until(deadline time.Time, done func() bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		c.mu.Lock()
		ok, changed := done(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		}
	}
}
