package actors

import "sync"

// ConnID names a connection that sessions speak through, in the runtime's
// table of them (Runtime.Connect): a message that attaches a session to a
// connection carries its number, not the connection (Attach.Conn). 0 is
// no connection: the session is detached.
type ConnID uint64

// conns are the connections of the runtime's clients, by number.
type conns struct {
	mu   sync.Mutex
	last ConnID
	m    map[ConnID]Attachment
}

// Connect enters the connection on in the runtime's table, until
// Disconnect, and returns its number.
func (rt *Runtime) Connect(on Attachment) ConnID {
	t := &rt.conns
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[ConnID]Attachment{}
	}
	t.last++
	t.m[t.last] = on
	return t.last
}

// Disconnect takes connection id out of the table: a session that takes
// an Attach to it from now on is detached, as it would be a moment later
// (the connection's sessions are detached as it closes).
func (rt *Runtime) Disconnect(id ConnID) {
	t := &rt.conns
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// connection is connection id: what its sessions write goes to Out, and
// their tools ask Client; both nil for none (0, or a connection closed).
func (rt *Runtime) connection(id ConnID) Attachment {
	t := &rt.conns
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}
