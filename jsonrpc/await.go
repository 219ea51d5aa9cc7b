package jsonrpc

import "strconv"

// Calls that outlive their callers' wait. Expect's wait forgets a call
// whose caller gives up, and an answer that comes after is then one to no
// request of this side's. A client that counts such answers as faults (the
// stress harness: every request must be answered exactly once) needs the
// call kept until its answer comes, whether or not anyone still waits.

// Await registers a call of this side's, as Expect does, and returns its
// id and the channel its answer comes on (buffered: the read loop never
// waits for the caller), closed when the Conn closes. The call stays
// registered until it is answered or the Conn closes: a caller that stops
// waiting leaves it, so that a late answer finds its call. The caller
// writes the request itself.
func (c *Conn) Await() (ID, <-chan Response) {
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
		c.outgoing[id] = ch
	}
	return id, ch
}

// Awaited says whether id is a call of this side's still waiting for its
// answer. Asked by the Source of the Conn's read loop before it hands a
// response over, it tells an answer to a call from one to no call (a
// second answer, or one to a call never made), which the read loop drops.
func (c *Conn) Awaited(id ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.outgoing[id]
	return ok
}
