package grains

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/internal/rpcerr"
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
	log *slog.Logger
	// budget is how long a call is tried before its request fails: long
	// enough for a lost node to leave the membership (failureTimeout) and
	// for a leaving one to drain.
	budget time.Duration

	mu    sync.Mutex
	conns map[*edgeConn]struct{}
}

// NewEdge makes the edge of member m; budget bounds how long a request is
// tried when its session's node cannot be reached.
func NewEdge(m *Member, budget time.Duration, log *slog.Logger) *Edge {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Edge{m: m, log: log, budget: budget, conns: map[*edgeConn]struct{}{}}
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

// Forwarder makes the Forwarder of a connection of owner, whose sessions
// must be in roots.
func (e *Edge) Forwarder(owner string, roots []string) protocol.NewForwarder {
	return func(out io.Writer, answered func(int)) protocol.Forwarder {
		c := &edgeConn{e: e, owner: owner, roots: roots, out: out, answered: answered,
			lanes: map[string]*lane{}, inflight: map[string]*request{}, failed: map[string]bool{},
			calls: map[string]*actor.PID{}, virtuals: map[string]*actor.PID{}, written: map[string]uint64{},
			waiting: map[string]*queued{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
		go c.writer()
		sys := e.m.System()
		c.self = sys.Root.Spawn(actor.PropsFromFunc(c.receive))
		c.me = &grainspb.Conn{Address: c.self.Address, Id: c.self.Id}
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		return c
	}
}

// deliver sends call to its session's grain until one takes it, and
// returns the node that did; it gives up after the edge's budget.
func (e *Edge) deliver(call *grainspb.Call) (*grainspb.Accepted, error) {
	c := e.m.Cluster()
	deadline := time.Now().Add(e.budget)
	pause := 20 * time.Millisecond
	for {
		start := time.Now()
		res, err := c.Request(call.SessionId, SessionKind, call, cluster.WithTimeout(2*time.Second))
		if a, ok := res.(*grainspb.Accepted); ok {
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
		time.Sleep(pause)
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// edgeConn is one client connection's Forwarder, and the actor the nodes
// that serve its sessions send their lines to.
type edgeConn struct {
	e        *Edge
	owner    string
	roots    []string
	out      io.Writer
	answered func(int)
	self     *actor.PID
	me       *grainspb.Conn

	mu       sync.Mutex
	seq      uint64
	lanes    map[string]*lane      // by session id
	inflight map[string]*request   // the client's requests not yet answered, by id key (jsonrpc.IDKey)
	failed   map[string]bool       // requests answered here with an error, by id key: their late answers are dropped
	calls    map[string]*actor.PID // mm's requests to the client, by id key: the virtual connection that made each
	virtuals map[string]*actor.PID // every virtual connection that took a call, by key
	written  map[string]uint64     // the last Lines written, by virtual connection
	closing  bool

	// The Lines the writer has yet to write, in the order they came: at
	// most one per virtual connection, which sends its next only once this
	// one is written.
	queue   []*queued
	waiting map[string]*queued // the queued Lines, by virtual connection
	wake    chan struct{}      // the writer has work
	stop    chan struct{}      // the writer ends
}

// lane is one session's calls, sent in order, one at a time.
type lane struct {
	sid   string
	open  *grainspb.Open // what opened the session: its reopening elsewhere
	queue []*grainspb.Call
	busy  bool
}

type request struct {
	sid  string
	id   json.RawMessage // as the client wrote it
	node string          // where it runs once accepted
}

func (c *edgeConn) Forward(sid, method string, id json.RawMessage, p any) {
	call := &grainspb.Call{Conn: c.me, Owner: c.owner, Roots: c.roots, Method: method, Id: id, SessionId: sid}
	if err := encodeParams(call, method, p); err != nil {
		// Nothing the edge decoded fails here; if it did, its request
		// is answered, and goes nowhere.
		c.e.log.Error(fmt.Sprintf("cluster: %v", err))
		if id != nil {
			c.mu.Lock()
			c.inflight[jsonrpc.IDKey(id)] = &request{sid: sid, id: id}
			c.mu.Unlock()
			c.fail([]string{jsonrpc.IDKey(id)}, err.Error())
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lanes[sid]
	if l == nil {
		l = &lane{sid: sid}
		c.lanes[sid] = l
	}
	if o := call.GetOpen(); o != nil {
		l.open = o // what reopens the session where it goes
	}
	c.seq++
	call.Seq, call.Reopen = c.seq, l.open
	if id != nil {
		c.inflight[jsonrpc.IDKey(id)] = &request{sid: sid, id: id}
	}
	l.queue = append(l.queue, call)
	if !l.busy {
		l.busy = true
		go c.send(l)
	}
}

// send delivers a lane's calls in order until it is empty.
func (c *edgeConn) send(l *lane) {
	for {
		c.mu.Lock()
		if len(l.queue) == 0 {
			l.busy = false
			c.mu.Unlock()
			return
		}
		call := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		var r *request
		key := jsonrpc.IDKey(call.Id)
		if call.Id != nil {
			r = c.inflight[key]
		}
		c.mu.Unlock()
		a, err := c.e.deliver(call)
		c.mu.Lock()
		mine := r != nil && c.inflight[key] == r
		if err == nil {
			if mine {
				r.node = a.Node
			}
			if v := a.Virtual; v != nil {
				c.virtuals[connKey(v)] = actor.NewPID(v.Address, v.Id)
			}
		}
		c.mu.Unlock()
		if err != nil {
			c.e.log.Warn(fmt.Sprintf("cluster: %s of session %s could not reach its node: %v", call.Method, call.SessionId, err))
			if mine {
				c.fail([]string{key}, fmt.Sprintf("cluster: the node of session %s could not be reached: %v", call.SessionId, err))
			}
		}
	}
}

// fail answers the client's requests with an error, here, and drops the
// answers their sessions may still send; keys are their id keys
// (jsonrpc.IDKey).
func (c *edgeConn) fail(ids []string, reason string) {
	var b bytes.Buffer
	n := 0
	c.mu.Lock()
	for _, key := range ids {
		r, ok := c.inflight[key]
		if !ok {
			continue
		}
		delete(c.inflight, key)
		c.failed[key] = true
		line, _ := json.Marshal(struct {
			JSONRPC string            `json:"jsonrpc"`
			ID      json.RawMessage   `json:"id"`
			Error   *acp.RequestError `json:"error"`
		}{"2.0", r.id, rpcerr.Internal(reason, nil)})
		b.Write(line)
		b.WriteByte('\n')
		n++
	}
	c.mu.Unlock()
	if n == 0 {
		return
	}
	_, _ = c.out.Write(b.Bytes())
	c.answered(n)
}

// lost fails the requests running on nodes that left the cluster.
func (c *edgeConn) lost(left []string) {
	var ids []string
	c.mu.Lock()
	for id, r := range c.inflight {
		if r.node != "" && slices.Contains(left, r.node) {
			ids = append(ids, id)
		}
	}
	for key, pid := range c.virtuals {
		if slices.Contains(left, pid.Address) {
			delete(c.virtuals, key)
		}
	}
	c.mu.Unlock()
	if len(ids) > 0 {
		c.e.log.Warn(fmt.Sprintf("cluster: node %v lost with %d request(s) of a client in flight", left, len(ids)))
		c.fail(ids, NodeLost)
	}
}

func (c *edgeConn) CancelRequest(requestID json.RawMessage) bool {
	c.mu.Lock()
	r, ok := c.inflight[jsonrpc.IDKey(requestID)]
	c.mu.Unlock()
	if !ok {
		return false
	}
	c.Forward(r.sid, "$/cancel_request", nil, cancelRequest{r.id})
	return true
}

func (c *edgeConn) Answer(id, result, rerr json.RawMessage) bool {
	key := jsonrpc.IDKey(id)
	c.mu.Lock()
	pid, ok := c.calls[key]
	delete(c.calls, key)
	c.mu.Unlock()
	if ok {
		c.e.m.System().Root.Send(pid, &grainspb.Answer{Conn: c.me, Id: id, Result: result, Error: rerr})
	}
	return ok
}

// Close tells every node serving the connection's sessions that its
// client is gone, once what was forwarded has been delivered, and waits
// until every request is answered, or wait.
func (c *edgeConn) Close(wait time.Duration) {
	deadline := time.Now().Add(wait)
	c.until(deadline, func() bool {
		for _, l := range c.lanes {
			if l.busy {
				return false
			}
		}
		return true
	})
	c.mu.Lock()
	c.closing = true
	virtuals := make([]*actor.PID, 0, len(c.virtuals))
	for _, pid := range c.virtuals {
		virtuals = append(virtuals, pid)
	}
	c.mu.Unlock()
	root := c.e.m.System().Root
	for _, pid := range virtuals {
		root.Send(pid, &grainspb.Gone{Conn: c.me})
	}
	c.until(deadline, func() bool { return len(c.inflight) == 0 })
	root.Stop(c.self)
	close(c.stop)
	c.e.mu.Lock()
	delete(c.e.conns, c)
	c.e.mu.Unlock()
}

// until waits until done (called under c.mu) or the deadline.
func (c *edgeConn) until(deadline time.Time, done func() bool) {
	for {
		c.mu.Lock()
		ok := done()
		c.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
