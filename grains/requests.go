package grains

import (
	"time"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// The client's requests as the edge handed them on: each is a note on the
// request in the connection's own table (protocol.Sink.Note), answered
// once, by its node or here.

// request is a client's request handed on to its session's node, as the
// connection's table keeps it in flight (its note: Sink.Note): the edge
// keeps no table of its own. Its fields after r are c.mu's.
type request struct {
	sid  string
	r    actors.Reply // as the connection's outbox expects its answer
	node string       // where it runs once accepted
	done bool         // answered, by its node or here (take)
}

// take claims the answering of r: true once only, for its node's answer
// or for the edge's error, whichever comes first.
func (c *edgeConn) take(r *request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.done {
		return false
	}
	r.done = true
	c.signal()
	return true
}

// noted is the client's request id as this edge handed it on, if it is
// in flight.
func (c *edgeConn) noted(id jsonrpc.ID) *request {
	note, ok := c.sink.NoteOf(id)
	r, mine := note.(*request)
	if !ok || !mine {
		return nil
	}
	return r
}

// handedOn are the requests this edge handed on that are not answered.
func (c *edgeConn) handedOn() []*request {
	var out []*request
	noted := c.sink.Notes(func(note any) bool { _, ok := note.(*request); return ok })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, note := range noted {
		if r := note.(*request); !r.done {
			out = append(out, r)
		}
	}
	return out
}

// fail answers the client's requests with an error, here; their sessions'
// late answers are dropped (take; the outbox answers a request once).
func (c *edgeConn) fail(rs []*request, reason string) {
	for _, r := range rs {
		if c.take(r) {
			c.sink.Answer(r.sid, r.r, nil, jsonrpc.Internal(reason, nil))
		}
	}
}

// untilAnswered waits until every request handed on is answered, or the
// deadline.
func (c *edgeConn) untilAnswered(deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		if len(c.handedOn()) == 0 {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		}
	}
}
