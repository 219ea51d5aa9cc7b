package jsonrpc

import (
	"context"
	"strconv"
)

// Calls that outlive their callers' wait. Expect's wait forgets a call
// whose caller gives up, and an answer that comes after is then one to no
// request of this side's. A client that counts such answers as faults (the
// stress harness: every request must be answered exactly once) needs the
// call kept until its answer comes, whether or not anyone still waits.

// Await registers a call of this side's about session, as Expect does,
// and returns its id and the channel its answer comes on (buffered: the
// read loop never waits for the caller), closed when the Conn closes. The
// call stays registered until it is answered or the Conn closes: a caller
// that stops waiting leaves it, so that a late answer finds its call. The
// caller writes the request itself.
func (c *Conn) Await(session string) (ID, <-chan Response) {
	id, ch := c.await(session)
	return id, ch
}

func (c *Conn) await(session string) (ID, chan Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	var id ID
	if c.opts.CallPrefix != "" {
		id = StringID(c.opts.CallPrefix + strconv.FormatUint(c.next, 10))
	} else {
		id = IntID(int64(c.next))
	}
	ch := make(chan Response, 1)
	if c.closed {
		close(ch)
	} else {
		c.outgoing[id] = call{ch: ch, session: session}
	}
	return id, ch
}

// Idle waits until none of the peer's requests is in flight — each read
// has its answer written — and says so, or returns false once ctx ends or
// the Conn closes. A server that shuts down ends a connection then.
func (c *Conn) Idle(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inFlight() > 0 {
		if c.closed || ctx.Err() != nil {
			return false
		}
		c.cond.Wait()
	}
	return true
}
