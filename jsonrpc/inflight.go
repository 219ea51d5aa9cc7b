package jsonrpc

// What a proxy needs of a Conn's two tables (mm connect: two Conns, the
// editor's and the server's, each answering the other's requests): a
// response read on one side answers either one of that side's calls or a
// request read on the other side; and at the end of a stream, or when a
// connection is replaced, the requests still in flight are looked over.

// Awaits says whether id is one of this side's calls waiting for its
// answer (Call, Expect).
func (c *Conn) Awaits(id ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.outgoing[id]
	return ok
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
