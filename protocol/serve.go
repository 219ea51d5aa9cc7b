package protocol

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mm-agent/mm/jsonrpc"
)

// ConnOptions wires one connection to a Hub: its framing, a Source and a
// Writer (or a stream of lines, In and Out).
type ConnOptions struct {
	In io.Reader // the client's messages, one per line
	// Source, when set, gives the client's messages, each parsed once
	// (mm serve's transports parse them to route them); In is not read.
	Source jsonrpc.Source
	Out    io.Writer // mm's messages, one per line
	// Writer, when set, takes mm's messages, each with what the transport
	// needs to know of it (jsonrpc.Out); Out is not written.
	Writer jsonrpc.Writer
	// LimitName is the key that bounds a message, for the answer to one
	// too long to read ("" is acp.maxLineBytes).
	LimitName string
	Log       *slog.Logger
	// Owner names the token the client came with: the sessions it creates
	// are its own, and it sees no other's. "" (mm -acp) sees every one.
	Owner string
	// Roots are the folders a session's cwd must be in; none: any.
	Roots []string
	// Forward, when set, makes the connection's Forwarder: its sessions
	// live on the nodes of a cluster (mm serve with cluster.*).
	Forward NewForwarder
}

// Conn is one served connection.
type Conn struct {
	agent *Agent
	in    *ingress
	out   *outbox
	rpc   *jsonrpc.Conn
	// w is the connection's one writer: Wait asks it whether the client
	// still reads.
	w *watchedWriter
	// hub is shut down by Wait when the connection owns it (mm -acp).
	hub *Hub
}

// Sole begins serving mm -acp's connection, alone on the hub: its
// sessions are not shared with another connection, and Wait ends the
// connection, then shuts the hub down.
func (h *Hub) Sole(o ConnOptions) *Conn {
	c := h.connect(o, false)
	c.hub = h
	return c
}

// Connect begins serving one connection on the hub, which it shares with
// others; Wait ends it.
func (h *Hub) Connect(o ConnOptions) *Conn { return h.connect(o, true) }

func (h *Hub) connect(o ConnOptions, shared bool) *Conn {
	log := o.Log
	if log == nil {
		log = h.log
	}
	w := o.Writer
	if w == nil {
		w = jsonrpc.NewLineWriter(o.Out)
	}
	watched := &watchedWriter{w: w}
	src := o.Source
	if src == nil {
		src = jsonrpc.Lines(o.In, int(h.cfg.ACP.MaxLineBytes))
	}
	limit := o.LimitName
	if limit == "" {
		limit = "acp.maxLineBytes"
	}
	a := &Agent{Caller: h.newCaller(log, o.Owner, o.Roots, shared, "")}
	in := &ingress{agent: a, log: log, done: make(chan struct{})}
	// The one connection: its read loop, its table of the client's
	// requests in flight (acp.maxPending of them: the back-pressure), its
	// table of mm's calls, and the writer every message goes through.
	rpc := jsonrpc.New(src, watched, jsonrpc.Options{Handler: in, Preempt: in.preempt,
		Max: int(h.cfg.ACP.MaxPending), MaxLine: int(h.cfg.ACP.MaxLineBytes), LimitName: limit, CallPrefix: "mm-", Log: log})
	box := newOutbox(rpc, log)
	a.box, a.rpc = box, rpc
	a.out, a.asks = box, client{call: a.call, forms: a.forms, caps: a.caps}
	box.encode = a.encode
	box.written = func(n int) {
		rpc.Written(n)
		if n > 0 {
			// With DeferRuntime, the runtime starts once a response
			// (initialize's) is out, not beside it.
			h.StartRuntime()
		}
	}
	if o.Forward != nil {
		a.forward = o.Forward(Sink{a: a})
	}
	go in.run(rpc)
	// The outbox delivers to actors once the runtime is up; the client's
	// initialize is read and answered meanwhile, needing none of it (with
	// DeferRuntime, before it starts).
	go func() { box.setRoot(h.started().Root()) }()
	return &Conn{agent: a, in: in, out: box, rpc: rpc, w: watched}
}

// Pending is the number of the client's requests read and not answered.
func (c *Conn) Pending() int { return c.rpc.Pending() }

// Idle waits until every request of the client's read has its answer
// written (true), or ctx ends or the connection closes (false): a server
// that shuts down ends the connection then.
func (c *Conn) Idle(ctx context.Context) bool { return c.rpc.Idle(ctx) }

// Awaits says whether id is a call of mm's (a permission, an elicitation)
// waiting for the client's answer, and the session it is about ("" for the
// connection's): the one table of mm's calls, which a transport that
// routes by session checks the client's answer against.
func (c *Conn) Awaits(id jsonrpc.ID) (session string, ok bool) { return c.rpc.AwaitsIn(id) }

// watchedWriter is the connection's writer, which knows whether a write
// is waiting on the client.
type watchedWriter struct {
	w jsonrpc.Writer
	// writing is when the write in progress began, as time since
	// clockStart (monotonic), 0 between writes: a write that does not
	// return is a client that does not read.
	writing atomic.Int64
}

// clockStart is the origin of watchedWriter.writing.
var clockStart = time.Now()

func (l *watchedWriter) Write(o jsonrpc.Out) error {
	l.writing.Store(int64(time.Since(clockStart)) | 1) // never 0
	defer l.writing.Store(0)
	return l.w.Write(o)
}

func (l *watchedWriter) WriteBatch(outs []jsonrpc.Out) error {
	l.writing.Store(int64(time.Since(clockStart)) | 1)
	defer l.writing.Store(0)
	if bw, ok := l.w.(jsonrpc.BatchWriter); ok {
		return bw.WriteBatch(outs)
	}
	for _, o := range outs {
		if err := l.w.Write(o); err != nil {
			return err
		}
	}
	return nil
}

// stuck says whether a write has been waiting on the client for d or more.
func (l *watchedWriter) stuck(d time.Duration) bool {
	began := l.writing.Load()
	return began != 0 && time.Since(clockStart)-time.Duration(began) >= d
}

// The wait for the last answers at the end of a connection ends when they
// are written, when the client stops reading, or when mm answers nothing
// for a long time. A client that stops reading is seen by mm's write to
// it: one that has not returned for clientIdle. mm's own pace is no such
// sign: on a loaded machine it may write nothing for a second or two while
// the client reads on, and giving up then would drop answers to requests
// it read (TestEveryPipedRequestIsAnswered). Only silence for mmHang, far
// above any pause of a working mm, is taken for a request it will never
// answer.
const (
	clientIdle = 5 * time.Second
	mmHang     = time.Minute
)

// SetContextWindow records the model's context window once it is known.
func (c *Conn) SetContextWindow(n int) { c.agent.hub.SetContextWindow(n) }

// Wait serves until the client closes its side or ctx ends, then answers
// every request read (prompts end cancelled) and lets the connection's
// sessions go: on mm -acp's own hub they stop (each turn cancelled, its
// model stream closed, its commands and what they left running killed,
// its file final); on a shared hub they are detached, live and loadable.
func (c *Conn) Wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-c.in.done:
	}
	a := c.agent
	a.stopTaking()
	if a.forward != nil {
		// The sessions served elsewhere end their turns cancelled too,
		// and answer what was forwarded.
		a.forward.Close(time.Second)
	}
	// Stdin closing is no reason to drop answers: every request read is
	// answered before the sessions go, unless the client stopped reading
	// too. With a Forwarder, what is left unanswered after its Close was
	// given up there (it bounds its own wait): a second's silence ends
	// the wait for it.
	hang := mmHang
	if a.forward != nil {
		hang = time.Second
	}
	switch c.rpc.Drain(func() bool { return c.w.stuck(clientIdle) }, hang) {
	case jsonrpc.DrainStuck:
		a.log.Warn(fmt.Sprintf("shutdown: %d request(s) left unanswered: the client does not read", c.rpc.Pending()))
	case jsonrpc.DrainSilent:
		a.log.Warn(fmt.Sprintf("shutdown: %d request(s) left unanswered: no answer came for %s", c.rpc.Pending(), hang))
	}
	if c.hub != nil {
		// The sessions' last words still reach this connection's writer.
		a.markClosed()
		c.hub.stopSessions()
		c.rpc.Close()
		a.cancel()
	} else {
		a.letGo()
		c.rpc.Close()
	}
	a.runtime() // a client may leave before the runtime is up
	// A client that stopped reading must not hold the process forever;
	// one that reads gets the last updates, however long mm takes to write
	// them.
	if !c.out.closeUnless(func() bool { return c.w.stuck(clientIdle) }) {
		a.log.Warn("shutdown: the client did not read the last updates")
	}
	if c.hub != nil {
		// Its sessions are stopped already: this stops the runtime and
		// closes the store.
		c.hub.Shutdown()
	}
}

// stopTaking begins a client's end: no session is created any more
// (those being created are answered), and every prompt of its sessions,
// running, queued or still to be served, ends cancelled.
func (c *Caller) stopTaking() {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	c.creating.Wait()
	for _, s := range c.hub.sessions.HeldBy(c) {
		s.Cancel(nil)
	}
}

// markClosed says the client takes no more sessions.
func (c *Caller) markClosed() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// letGo ends a client on a shared hub: once their turns have ended, its
// sessions are left detached, live and loadable; its context ends.
func (c *Caller) letGo() {
	c.markClosed()
	for _, s := range c.hub.sessions.HeldBy(c) {
		s.Settle()
	}
	c.hub.detach(c)
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != 0 {
		c.runtime().Disconnect(conn)
	}
	c.cancel()
}

// isDraining says whether the client is leaving.
func (c *Caller) isDraining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining
}
