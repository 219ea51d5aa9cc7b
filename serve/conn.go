package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
)

// connection is one ACP connection, whatever carries it: the inbox mm reads,
// mm's side of it, and the client's requests that mm has not answered yet.
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
	pending  map[string]string // idKey of a request mm has not answered → its session ("" = the connection's)
	why      string            // why the connection ends; "" while it does not
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
		done: make(chan struct{}), endc: make(chan struct{}), pending: map[string]string{}}
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
func (c *connection) connect(out io.Writer) error {
	mm, err := c.s.o.Connector.Connect(c.ctx, c.client, c.in, out)
	if err != nil {
		c.log.Error(fmt.Sprintf("[serve] %s connection of %s: %v", c.client.Transport, c.client.Token, err))
		return err
	}
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

// sent records a request of the client's on its way to mm, and where
// its answer goes. The entry stays until the answer is written; Send's
// failure takes it back (unsent).
func (c *connection) sent(key, session string) {
	c.mu.Lock()
	c.pending[key] = session
	c.mu.Unlock()
}

func (c *connection) unsent(key string) {
	c.mu.Lock()
	delete(c.pending, key)
	c.mu.Unlock()
}

// answered takes the request that an answer of mm's with this id key
// answers, and returns where the answer goes ("" = the connection's
// stream). A connection that drains ends once nothing is left to answer.
func (c *connection) answered(key string) string {
	c.mu.Lock()
	session := c.pending[key]
	delete(c.pending, key)
	idle := len(c.pending) == 0 && c.draining
	c.mu.Unlock()
	if idle {
		c.end("the server is shutting down")
	}
	return session
}

// startDrain ends the connection at once if mm owes its client nothing,
// else once mm has answered everything or after serve.drainTimeout,
// whichever comes first: a turn in flight gets that long to finish.
func (c *connection) startDrain(timeout time.Duration) {
	c.mu.Lock()
	if c.over {
		c.mu.Unlock()
		return // no timer may outlive the connection
	}
	c.draining = true
	idle := len(c.pending) == 0
	if !idle {
		c.drain = time.AfterFunc(timeout, func() { c.end("the server is shutting down (serve.drainTimeout)") })
	}
	c.mu.Unlock()
	if idle {
		c.end("the server is shutting down")
	}
}

// newID returns a random UUID (version 4), as the TypeScript SDK's
// connection ids are.
func newID() string { return uuid.NewString() }
