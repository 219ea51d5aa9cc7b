package jsonrpc

// What a proxy needs of a Conn's two tables (mm connect: two Conns, the
// editor's and the server's, each answering the other's requests): a
// response read on one side answers either one of that side's calls or a
// request read on the other side; and at the end of a stream, or when a
// connection is replaced, the requests still in flight are looked over.

// Awaits says whether id is one of this side's calls waiting for its
// answer (Call, Expect, Await). Asked by the Source of the Conn's read
// loop before it hands a response over, it tells an answer to a call from
// one to no call (a second answer, or one to a call never made).
func (c *Conn) Awaits(id ID) bool {
	_, ok := c.AwaitsIn(id)
	return ok
}

// AwaitsIn is Awaits, with the session the call is about ("" for the
// connection's): a transport that routes by session checks that the
// peer's answer comes from where the call went.
func (c *Conn) AwaitsIn(id ID) (session string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.outgoing[id]
	return w.session, ok
}

// Requests is a copy of the table of the peer's requests read and not
// answered yet, by id.
func (c *Conn) Requests() map[ID]Incoming {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[ID]Incoming, len(c.incoming))
	for id, in := range c.incoming {
		m[id] = in
	}
	return m
}
