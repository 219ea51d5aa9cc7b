package jsonrpc

import (
	"context"
	"errors"
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
	return c.await(session, call{})
}

// ErrAbandoned is the wait's error of a call given up by its note
// (Conn.Abandon).
var ErrAbandoned = errors.New("the call was given up")

// ExpectNoted is Expect for a call that keeps note while it is in flight:
// Abandon gives up the calls whose note it names, as ctx's end does for
// one (the peer is told with $/cancel_request by whoever waits), and
// their wait returns ErrAbandoned.
func (c *Conn) ExpectNoted(session string, note any) (id ID, wait func(ctx context.Context) (Response, error)) {
	abandon := make(chan struct{})
	id, ch := c.await(session, call{note: note, abandon: abandon})
	return id, c.waiter(id, ch, abandon)
}

// waiter is the wait of call id, whose answer comes on ch: the answer,
// ErrClosed, ErrAbandoned once abandon is closed (nil: never), or ctx's
// error, the call forgotten.
func (c *Conn) waiter(id ID, ch chan Response, abandon chan struct{}) func(ctx context.Context) (Response, error) {
	return func(ctx context.Context) (Response, error) {
		select {
		case r, ok := <-ch:
			if !ok {
				return Response{}, ErrClosed
			}
			return r, nil
		case <-abandon:
			return Response{}, ErrAbandoned
		case <-ctx.Done():
			c.forget(id)
			return Response{}, ctx.Err()
		}
	}
}

// Abandon gives up this side's calls whose note keep keeps (ExpectNoted),
// and says how many.
func (c *Conn) Abandon(keep func(note any) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id, w := range c.outgoing {
		if w.abandon != nil && keep(w.note) {
			close(w.abandon)
			delete(c.outgoing, id)
			n++
		}
	}
	return n
}

// await registers a call about session, with what w holds of it besides
// (its note), and returns its id and where its answer comes.
func (c *Conn) await(session string, w call) (ID, chan Response) {
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
		w.ch, w.session = ch, session
		c.outgoing[id] = w
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
