// Package registry is the table of a process's live sessions: whose each
// one is (the token that made it) and which connection holds it, if any.
// It is plain data behind one lock, with no protocol and no actor in it: a
// session is any comparable value (the hub's is *actors.Session), a
// connection another (the hub's is *protocol.Caller).
//
// Ownership: the owner "" is mm -acp's user, who owns every session; any
// other owner sees only the sessions it made. A session another owner
// holds does not exist for them (Owned), yet its id is taken (Taken), so
// that no one can open a second copy of it.
//
// Liveness: a session says whether it has ended (Session.Ended); the table
// takes an ended one for gone, and drops it as it meets it. A session
// that ends on its own (its save fenced, its opening failed, its actor
// stopped by the cluster) needs no one to tell the table: no callback
// from the session into whoever keeps it.
//
// Concurrency: every method may be called from any goroutine.
package registry

import (
	"errors"
	"sync"
	"time"
)

// Session is what the table holds: comparable, saying whether it has
// ended (it takes no request any more), and whether its actor is gone.
type Session interface {
	comparable
	Ended() bool
	Gone() bool
}

// Table holds the live sessions S, each attached to at most one
// connection C (C's zero value: none).
type Table[S Session, C comparable] struct {
	mu       sync.Mutex
	sessions map[string]*entry[S, C]
	// closed is set by Close: no session is added any more.
	closed bool
	// behind is, by session id, the actor of the latest work on a session
	// that is not live (Behind).
	behind map[string]S
	// behinds counts the Behinds since the table last dropped the works
	// whose actors are gone (kept: how many it kept then).
	behinds, kept int
	// rooms is, by owner, what its sessions in the table hold (Fits):
	// kept as sessions come and go, so that a new session's check costs
	// the same however many are live. It counts the sessions that ended
	// on their own until they are met: a refusal looks again (sweep).
	rooms map[string]room
	// adds counts the Adds since the table last dropped every ended
	// session (swept: how many it kept then), which it does again once
	// they pass that number: the table holds at most about twice its
	// live sessions, at a constant cost per Add.
	adds, swept int
}

// room is what an owner's live sessions hold.
type room struct{ sessions, mcp int }

type entry[S Session, C comparable] struct {
	s     S
	cwd   string
	owner string
	conn  C
	// detached is when the session was left to no connection (Detach);
	// zero while one holds it.
	detached time.Time
	// mcp counts the MCP server processes it runs.
	mcp int
}

// New returns an empty table.
func New[S Session, C comparable]() *Table[S, C] {
	return &Table[S, C]{sessions: map[string]*entry[S, C]{}, behind: map[string]S{}, rooms: map[string]room{}}
}

// put records e under id, in place of the entry there. t.mu is held.
func (t *Table[S, C]) put(id string, e *entry[S, C]) {
	t.drop(id)
	t.sessions[id] = e
	r := t.rooms[e.owner]
	r.sessions++
	r.mcp += e.mcp
	t.rooms[e.owner] = r
}

// drop takes id's entry out, if any, and returns it. t.mu is held.
func (t *Table[S, C]) drop(id string) *entry[S, C] {
	e := t.sessions[id]
	if e == nil {
		return nil
	}
	delete(t.sessions, id)
	r := t.rooms[e.owner]
	r.sessions--
	r.mcp -= e.mcp
	if r.sessions == 0 {
		delete(t.rooms, e.owner)
	} else {
		t.rooms[e.owner] = r
	}
	return e
}

// live returns id's entry when its session has not ended; an ended one
// goes. t.mu is held.
func (t *Table[S, C]) live(id string) *entry[S, C] {
	e := t.sessions[id]
	if e != nil && e.s.Ended() {
		t.drop(id)
		return nil
	}
	return e
}

// entries yields the entries whose sessions have not ended, and drops
// the others as it meets them. t.mu is held.
func (t *Table[S, C]) entries(yield func(id string, e *entry[S, C]) bool) {
	for id, e := range t.sessions {
		if e.s.Ended() {
			t.drop(id)
		} else if !yield(id, e) {
			return
		}
	}
}

// sweep drops the ended sessions of owner (every owner's for ""), and
// says whether it dropped any. t.mu is held.
func (t *Table[S, C]) sweep(owner string) bool {
	dropped := false
	for id, e := range t.sessions {
		if (owner == "" || e.owner == owner) && e.s.Ended() {
			t.drop(id)
			dropped = true
		}
	}
	return dropped
}

// fits says what refuse says of what owner has live; a refusal counted
// sessions that ended on their own, it looks again without them. t.mu is
// held.
func (t *Table[S, C]) fits(owner string, refuse func(sessions, mcp int) error) error {
	err := refuse(t.room(owner))
	if err != nil && t.sweep(owner) {
		err = refuse(t.room(owner))
	}
	return err
}

// mine says whether owner may see a session of e's.
func (e *entry[S, C]) mine(owner string) bool { return owner == "" || e.owner == owner }

// Add records session s (its id, its folder, the MCP server processes it
// runs), owned by owner and attached to c. It refuses with ErrClosed when
// the table is closed, and with what refuse says, called under the
// table's lock with what owner has live already (sessions, MCP
// processes): a connection that is closing takes no session, and none of
// its sessions can slip past its own HeldBy; an owner past its limits
// gets none more.
func (t *Table[S, C]) Add(id, cwd string, s S, owner string, c C, mcp int, refuse func(sessions, mcp int) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if refuse != nil {
		if err := t.fits(owner, refuse); err != nil {
			return err
		}
	}
	if t.adds++; t.adds > t.swept {
		t.sweep("")
		t.adds, t.swept = 0, len(t.sessions)
	}
	t.put(id, &entry[S, C]{s: s, cwd: cwd, owner: owner, conn: c, mcp: mcp})
	return nil
}

// ErrClosed refuses a session once the table is closed.
var ErrClosed = errors.New("the table of live sessions is closed")

// Fits says what refuse says of what owner has live (its sessions, and
// their MCP server processes): nil when one more session fits.
func (t *Table[S, C]) Fits(owner string, refuse func(sessions, mcp int) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fits(owner, refuse)
}

// Room says what owner has live: its sessions, and their MCP server
// processes. It walks the table.
func (t *Table[S, C]) Room(owner string) (sessions, mcp int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(owner)
	return t.room(owner)
}

func (t *Table[S, C]) room(owner string) (sessions, mcp int) {
	r := t.rooms[owner]
	return r.sessions, r.mcp
}

// Attached returns session id when connection c holds it.
func (t *Table[S, C]) Attached(id string, c C) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.live(id); e != nil && e.conn == c {
		return e.s, true
	}
	var none S
	return none, false
}

// Owned returns session id when owner may see it, with the connection that
// holds it (C's zero value: none).
func (t *Table[S, C]) Owned(id, owner string) (S, C, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.live(id); e != nil && e.mine(owner) {
		return e.s, e.conn, true
	}
	var (
		s S
		c C
	)
	return s, c, false
}

// Taken says whether live session id belongs to someone other than owner.
func (t *Table[S, C]) Taken(id, owner string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live(id)
	return e != nil && !e.mine(owner)
}

// Move records that connection c now holds session id.
func (t *Table[S, C]) Move(id string, c C) {
	t.mu.Lock()
	if e := t.live(id); e != nil {
		e.conn = c
		e.detached = time.Time{}
	}
	t.mu.Unlock()
}

// Release takes session id out of the table when connection c holds it,
// and returns it.
func (t *Table[S, C]) Release(id string, c C) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live(id)
	if e == nil || e.conn != c {
		var none S
		return none, false
	}
	t.drop(id)
	return e.s, true
}

// Remove takes session id out of the table when owner may see it,
// whichever connection holds it, and returns it.
func (t *Table[S, C]) Remove(id, owner string) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live(id)
	if e == nil || !e.mine(owner) {
		var none S
		return none, false
	}
	t.drop(id)
	return e.s, true
}

// Forget takes session id out of the table when it is still s: a session
// whose opening failed, before its requester hears why (a session that
// ends on its own goes as the table meets it, Ended). A newer session of
// the same id stays.
func (t *Table[S, C]) Forget(id string, s S) {
	t.mu.Lock()
	if e := t.sessions[id]; e != nil && e.s == s {
		t.drop(id)
	}
	t.mu.Unlock()
}

// HeldBy lists the sessions connection c holds.
func (t *Table[S, C]) HeldBy(c C) []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []S
	for _, e := range t.entries {
		if e.conn == c {
			out = append(out, e.s)
		}
	}
	return out
}

// Detach leaves session id to no connection when c holds it, and says
// whether it did: the session stays live, for its owner to take up from
// another connection.
func (t *Table[S, C]) Detach(id string, c C) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live(id)
	if e == nil || e.conn != c {
		return false
	}
	var none C
	e.conn = none
	e.detached = time.Now()
	return true
}

// TakeDetached takes out of the table, and returns, the sessions no
// connection has held since before.
func (t *Table[S, C]) TakeDetached(before time.Time) []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []S
	for id, e := range t.entries {
		if !e.detached.IsZero() && e.detached.Before(before) {
			out = append(out, e.s)
			t.drop(id)
		}
	}
	return out
}

// Cwds lists the folders of the live sessions owner may see.
func (t *Table[S, C]) Cwds(owner string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, e := range t.entries {
		if e.mine(owner) {
			out = append(out, e.cwd)
		}
	}
	return out
}

// All lists every live session.
func (t *Table[S, C]) All() []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]S, 0, len(t.sessions))
	for _, e := range t.entries {
		out = append(out, e.s)
	}
	return out
}

// Close empties the table, refuses every Add from now on, and returns the
// sessions it held, for the caller to stop.
func (t *Table[S, C]) Close() []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	out := make([]S, 0, len(t.sessions))
	for _, e := range t.sessions {
		out = append(out, e.s)
	}
	clear(t.sessions)
	clear(t.rooms)
	return out
}

// Len counts the live sessions, attached or not. It walks the table.
func (t *Table[S, C]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep("")
	return len(t.sessions)
}

// Holds says whether session id is live.
func (t *Table[S, C]) Holds(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live(id) != nil
}

// A session that is not live has work done on it by actors of their own
// (actors.Runtime.Behind): a close's answer once its file is final, a
// delete, a fork's read of its stored file, a load. Each starts once the
// actor of the work before it on the same id is gone: the table keeps
// the latest by id, and each work's actor watches the one before.

// Behind records the actor of the latest work on session id, which spawn
// makes behind the one before it (its zero value: none, or one gone),
// under the table's lock so that the works keep the order of the calls.
func (t *Table[S, C]) Behind(id string, spawn func(before S) S) S {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.behinds++; t.behinds > t.kept {
		for k, b := range t.behind {
			if b.Gone() {
				delete(t.behind, k)
			}
		}
		t.behinds, t.kept = 0, len(t.behind)
	}
	s := spawn(t.latest(id))
	t.behind[id] = s
	return s
}

// Latest returns the actor of the latest work on session id (the zero
// value: none, or one gone), for what is done with it next to start
// behind.
func (t *Table[S, C]) Latest(id string) S {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest(id)
}

func (t *Table[S, C]) latest(id string) S {
	b, ok := t.behind[id]
	if ok && b.Gone() {
		delete(t.behind, id)
		var none S
		return none
	}
	return b
}
