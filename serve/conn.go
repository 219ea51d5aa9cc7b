package serve

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mm-agent/mm/jsonrpc"
)

// connection is one ACP connection, whatever carries it: the inbox mm reads
// and mm's side of it, whose table of the client's requests in flight is
// the one the transports ask (Conn.Idle, Conn.Awaits).
//
// Concurrency: its methods may be called from any goroutine; mu guards
// the fields below it.
type connection struct {
	s      *Server
	id     string // Acp-Connection-Id
	client Client
	in     *inbox
	ctx    context.Context // mm's side's; cancelled when the place is given back
	cancel context.CancelFunc
	done   chan struct{} // closed once mm's Wait has returned
	endc   chan struct{} // closed by the first end
	log    *slog.Logger
	ws     *wsOut // a WebSocket connection's way out, across its sockets; nil over HTTP

	mu       sync.Mutex
	mm       Conn   // mm's side, once connected
	why      string // why the connection ends; "" while it does not
	draining bool
	drain    *time.Timer // ends a draining connection at serve.drainTimeout
	over     bool        // mm's side has ended
}

// open reserves a place for a new connection, or says why there is none:
// "limit" (serve.maxConnections), "draining" or "unready" (Options.Ready).
func (s *Server) open(transport string, c Client) (*connection, string) {
	ready := s.ready() // outside the lock: it is the runtime's to answer
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		return nil, "draining"
	case !ready:
		return nil, "unready"
	case len(s.conns) >= s.o.MaxConnections:
		return nil, "limit"
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn := &connection{s: s, id: s.newConnID(), client: c, in: newInbox(), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), endc: make(chan struct{})}
	conn.log = s.o.Log.With("conn", conn.id[:8])
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	s.metrics.open.WithLabelValues(transport).Inc()
	s.metrics.total.WithLabelValues(transport).Inc()
	return conn, ""
}

// connect opens mm's side of the connection, which writes on out, and
// closes done once it has ended. It fails only when the Connector does;
// the caller then releases the connection.
func (c *connection) connect(out jsonrpc.Writer) error {
	mm, err := c.s.o.Connector.Connect(c.ctx, c.client, c.in, out)
	if err != nil {
		c.log.Error(fmt.Sprintf("[serve] %s connection of %s: %v", c.client.Transport, c.client.Token, err))
		return err
	}
	c.mu.Lock()
	c.mm = mm
	c.mu.Unlock()
	c.log.Info(fmt.Sprintf("[serve] %s connection opened by %s", c.client.Transport, c.client.Token))
	go func() {
		mm.Wait(c.ctx)
		c.mu.Lock()
		c.over = true
		why := c.why
		if c.drain != nil {
			c.drain.Stop()
		}
		c.mu.Unlock()
		if why == "" {
			why = "mm ended it"
		}
		c.log.Info(fmt.Sprintf("[serve] %s connection of %s closed: %s", c.client.Transport, c.client.Token, why))
		close(c.done)
	}()
	return nil
}

// release gives the connection's place back, once its transport is done
// with it: no goroutine of the connection's is left.
func (c *connection) release() {
	c.cancel()
	c.in.Close()
	c.in.done() // the room of what mm read last
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.metrics.open.WithLabelValues(c.client.Transport).Dec()
	s.wg.Done()
}

// end closes the inbox: mm reads EOF, as when an editor closes stdin,
// cancels the turns in flight, saves and answers what it read. why is
// logged with the close; the first one counts.
func (c *connection) end(why string) {
	c.mu.Lock()
	first := c.why == ""
	if first {
		c.why = why
	}
	c.mu.Unlock()
	c.in.Close()
	if first {
		close(c.endc)
	}
}

// awaits says whether id is a call of mm's waiting for the client's
// answer, and the session it is about (Conn.Awaits).
func (c *connection) awaits(id jsonrpc.ID) (session string, ok bool) {
	c.mu.Lock()
	mm := c.mm
	c.mu.Unlock()
	if mm == nil {
		return "", false
	}
	return mm.Awaits(id)
}

// startDrain ends the connection at once if mm owes its client nothing,
// else once mm has answered everything or after serve.drainTimeout,
// whichever comes first: a turn in flight gets that long to finish.
func (c *connection) startDrain(timeout time.Duration) {
	c.mu.Lock()
	if c.over || c.draining {
		c.mu.Unlock()
		return // no timer may outlive the connection
	}
	c.draining = true
	mm := c.mm
	c.drain = time.AfterFunc(timeout, func() { c.end("the server is shutting down (serve.drainTimeout)") })
	c.mu.Unlock()
	if mm == nil {
		c.end("the server is shutting down")
		return
	}
	// mm's table of the client's requests in flight says when nothing is
	// owed; the wait ends with the connection (c.ctx) at the latest.
	go func() {
		if mm.Idle(c.ctx) {
			c.end("the server is shutting down")
		}
	}()
}

// newID returns a random UUID (version 4), as the TypeScript SDK's
// connection ids are.
func newID() string { return uuid.NewString() }
