package registry

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// A session here is a name, a connection a number (0: none).
type table = Table[sess, int]

// sess is a session of the tests': it has ended once named in ended.
type sess string

var ended sync.Map

func (s sess) Ended() bool { _, ok := ended.Load(s); return ok }

// Gone is Ended: a test's session has no actor to outlive its end.
func (s sess) Gone() bool { return s.Ended() }

func filled(t *testing.T) *table {
	t.Helper()
	tb := New[sess, int]()
	for _, s := range []struct {
		id, cwd, owner string
		conn           int
	}{
		{"a1", "/w/a", "alice", 1},
		{"a2", "/w/a2", "alice", 2},
		{"b1", "/w/b", "bob", 3},
	} {
		if tb.Add(s.id, s.cwd, sess("S"+s.id), s.owner, s.conn, 0, nil) != nil {
			t.Fatalf("Add(%s) refused on an open table", s.id)
		}
	}
	return tb
}

func TestOwnership(t *testing.T) {
	tb := filled(t)
	for _, c := range []struct {
		id, owner string
		owned     bool
		conn      int
		taken     bool
	}{
		{"a1", "alice", true, 1, false},
		{"a1", "", true, 1, false}, // mm -acp's user owns every session
		{"a1", "bob", false, 0, true},
		{"b1", "alice", false, 0, true},
		{"b1", "bob", true, 3, false},
		{"nope", "bob", false, 0, false},
	} {
		s, conn, ok := tb.Owned(c.id, c.owner)
		if ok != c.owned || conn != c.conn || (ok && s != sess("S"+c.id)) {
			t.Errorf("Owned(%s, %q) = %q, %d, %v; want owned %v on %d", c.id, c.owner, s, conn, ok, c.owned, c.conn)
		}
		if got := tb.Taken(c.id, c.owner); got != c.taken {
			t.Errorf("Taken(%s, %q) = %v, want %v", c.id, c.owner, got, c.taken)
		}
	}
	cwds := tb.Cwds("alice")
	slices.Sort(cwds)
	if !slices.Equal(cwds, []string{"/w/a", "/w/a2"}) {
		t.Errorf("Cwds(alice) = %v", cwds)
	}
	if all := tb.Cwds(""); len(all) != 3 {
		t.Errorf("Cwds(\"\") = %v, want every folder", all)
	}
}

func TestAttachment(t *testing.T) {
	tb := filled(t)
	if _, ok := tb.Attached("a1", 2); ok {
		t.Error("a1 is attached to 1, not 2")
	}
	tb.Move("a1", 2)
	if s, ok := tb.Attached("a1", 2); !ok || s != "Sa1" {
		t.Errorf("after Move, Attached(a1, 2) = %q, %v", s, ok)
	}
	held := tb.HeldBy(2)
	slices.Sort(held)
	if !slices.Equal(held, []sess{"Sa1", "Sa2"}) {
		t.Errorf("HeldBy(2) = %v", held)
	}
	if tb.Detach("a1", 1) {
		t.Error("connection 1 detached a session it no longer holds")
	}
	if !tb.Detach("a1", 2) {
		t.Error("Detach(a1, 2) did nothing")
	}
	if _, conn, ok := tb.Owned("a1", "alice"); !ok || conn != 0 {
		t.Errorf("a detached session: Owned = %d, %v; want live on no connection", conn, ok)
	}
	if _, ok := tb.Release("a2", 1); ok {
		t.Error("Release by a connection that does not hold it")
	}
	if s, ok := tb.Release("a2", 2); !ok || s != "Sa2" || tb.Holds("a2") {
		t.Errorf("Release(a2, 2) = %q, %v; still held: %v", s, ok, tb.Holds("a2"))
	}
	if _, ok := tb.Remove("b1", "alice"); ok || !tb.Holds("b1") {
		t.Error("alice removed bob's session")
	}
	if s, ok := tb.Remove("b1", "bob"); !ok || s != "Sb1" || tb.Len() != 1 {
		t.Errorf("Remove(b1, bob) = %q, %v; %d left", s, ok, tb.Len())
	}
}

func TestForgetKeepsANewerSession(t *testing.T) {
	tb := New[sess, int]()
	tb.Add("x", "/w", "old", "", 1, 0, nil)
	tb.Add("x", "/w", "new", "", 1, 0, nil) // taken up again
	tb.Forget("x", "old")
	if s, _, ok := tb.Owned("x", ""); !ok || s != "new" {
		t.Errorf("the newer session went with the old one: %q, %v", s, ok)
	}
	tb.Forget("x", "new")
	if tb.Holds("x") {
		t.Error("Forget left the session")
	}
}

// TestWorkChain: each work on a session that is not live is made behind
// the latest before it, in the order of the calls; a work whose actor is
// gone is none, and the table forgets it.
func TestWorkChain(t *testing.T) {
	tb := New[sess, int]()
	var none sess
	if tb.Latest("x") != none {
		t.Fatal("a session no work was done on has some")
	}
	var got []sess
	spawn := func(s sess) func(sess) sess {
		return func(before sess) sess { got = append(got, before); return s }
	}
	tb.Behind("x", spawn("closing"))
	tb.Behind("x", spawn("deleting"))
	tb.Behind("y", spawn("other"))
	if !slices.Equal(got, []sess{"", "closing", ""}) {
		t.Fatalf("the works were made behind %q, want none, the close, none", got)
	}
	if tb.Latest("x") != "deleting" || tb.Latest("y") != "other" {
		t.Fatal("Latest is not the latest work, or work on x shows on y")
	}
	ended.Store(sess("deleting"), true)
	t.Cleanup(func() { ended.Delete(sess("deleting")) })
	if tb.Latest("x") != none {
		t.Fatal("a work whose actor is gone is still waited for")
	}
	// Works whose actors are gone and never looked up again: the table
	// keeps about as many as it has going.
	for i := range 1000 {
		s := sess(fmt.Sprintf("w%d", i))
		tb.Behind(string(s), spawn(s))
		ended.Store(s, true)
		t.Cleanup(func() { ended.Delete(s) })
	}
	if n := len(tb.behind); n > 4 {
		t.Errorf("the table keeps %d works whose actors are gone", n)
	}
}

func TestClose(t *testing.T) {
	tb := filled(t)
	if tb.Add("c", "/w", "Sc", "", 1, 0, func(int, int) error { return errors.New("closing") }) == nil || tb.Holds("c") {
		t.Error("Add went past a refusing connection")
	}
	all := tb.Close()
	slices.Sort(all)
	if !slices.Equal(all, []sess{"Sa1", "Sa2", "Sb1"}) || tb.Len() != 0 {
		t.Errorf("Close = %v, %d left", all, tb.Len())
	}
	if tb.Add("d", "/w", "Sd", "", 1, 0, nil) == nil {
		t.Error("a closed table took a session")
	}
}

// TestConcurrent is for the race detector: every method at once.
func TestConcurrent(t *testing.T) {
	tb := New[sess, int]()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := string(rune('a' + (g+i)%5))
				tb.Add(id, "/w", sess(id), "o", g, 0, nil)
				tb.Owned(id, "o")
				tb.Move(id, g+1)
				tb.HeldBy(g + 1)
				tb.Detach(id, g+1)
				tb.Cwds("")
				tb.Release(id, 0)
				tb.Forget(id, sess(id))
				tb.Behind(id, func(sess) sess { return sess(id) })
				tb.Latest(id)
			}
		}()
	}
	wg.Wait()
	tb.Close()
	if tb.Len() != 0 {
		t.Errorf("%d left after Close", tb.Len())
	}
}

// TestRoomAndDetached: what an owner has live (sessions, MCP processes) is
// what refuse is given; a session detached before a time is taken out
// with TakeDetached, and one moved to a connection again is not.
func TestRoomAndDetached(t *testing.T) {
	tb := New[sess, int]()
	limit := func(sessions, mcp int) error {
		if sessions >= 2 || mcp+3 > 3 {
			return errors.New("full")
		}
		return nil
	}
	if err := tb.Add("a", "/w", "Sa", "alice", 1, 1, limit); err != nil {
		t.Fatal(err)
	}
	if err := tb.Add("b", "/w", "Sb", "alice", 1, 3, limit); err == nil {
		t.Error("an owner past its MCP processes got a session")
	}
	if err := tb.Add("c", "/w", "Sc", "bob", 1, 3, limit); err != nil {
		t.Errorf("another owner: %v", err)
	}
	if n, m := tb.Room("alice"); n != 1 || m != 1 {
		t.Errorf("alice's room: %d sessions, %d MCP", n, m)
	}
	tb.Detach("a", 1)
	tb.Detach("c", 1)
	tb.Move("c", 2) // taken up again
	time.Sleep(time.Millisecond)
	if got := tb.TakeDetached(time.Now()); len(got) != 1 || got[0] != "Sa" || tb.Holds("a") || !tb.Holds("c") {
		t.Errorf("TakeDetached: %v; holds a %v, c %v", got, tb.Holds("a"), tb.Holds("c"))
	}
}

// TestRoomFollowsEveryExit: Room is kept as sessions come and go, not
// counted again: after every way a session enters or leaves the table
// (Add, an Add of an id already there, Release, Remove, Forget,
// TakeDetached, Close), each owner's room is what its live sessions hold.
func TestRoomFollowsEveryExit(t *testing.T) {
	tb := New[sess, int]()
	want := map[string][2]int{}
	live := map[string]struct {
		owner string
		mcp   int
	}{}
	check := func(step string) {
		t.Helper()
		got := map[string][2]int{}
		for _, e := range live {
			r := got[e.owner]
			got[e.owner] = [2]int{r[0] + 1, r[1] + e.mcp}
		}
		want = got
		for _, o := range []string{"alice", "bob", ""} {
			if n, m := tb.Room(o); n != want[o][0] || m != want[o][1] {
				t.Errorf("after %s: %q's room is %d sessions, %d MCP; its live sessions hold %v", step, o, n, m, want[o])
			}
		}
	}
	add := func(id, owner string, conn, mcp int) {
		if err := tb.Add(id, "/w", sess("S"+id), owner, conn, mcp, nil); err != nil {
			t.Fatal(err)
		}
		live[id] = struct {
			owner string
			mcp   int
		}{owner, mcp}
	}
	add("a", "alice", 1, 2)
	add("b", "alice", 1, 1)
	add("c", "bob", 2, 4)
	add("d", "bob", 2, 0)
	check("adds")
	add("a", "bob", 2, 5) // the same id again: the old entry goes
	check("an id added again")
	tb.Release("b", 1)
	delete(live, "b")
	check("Release")
	tb.Remove("c", "bob")
	delete(live, "c")
	check("Remove")
	tb.Forget("d", "Sd")
	delete(live, "d")
	check("Forget")
	add("e", "alice", 1, 3)
	tb.Detach("e", 1)
	time.Sleep(time.Millisecond)
	tb.TakeDetached(time.Now())
	delete(live, "e")
	check("TakeDetached")
	tb.Close()
	clear(live)
	check("Close")
}

// TestEndedIsGone: a session that ended on its own (no one told the
// table) is gone for every lookup, its room is free for its owner's next
// session, and the table does not keep it forever.
func TestEndedIsGone(t *testing.T) {
	tb := New[sess, int]()
	limit := func(sessions, mcp int) error {
		if sessions >= 2 {
			return errors.New("full")
		}
		return nil
	}
	for _, id := range []string{"e1", "e2"} {
		if err := tb.Add(id, "/w/"+id, sess("S"+id), "eve", 1, 1, limit); err != nil {
			t.Fatal(err)
		}
	}
	if tb.Fits("eve", limit) == nil {
		t.Fatal("a third session fits a limit of two")
	}
	ended.Store(sess("Se1"), true)
	t.Cleanup(func() { ended.Delete(sess("Se1")) })
	if _, _, ok := tb.Owned("e1", "eve"); ok {
		t.Error("Owned finds an ended session")
	}
	if _, ok := tb.Attached("e1", 1); ok {
		t.Error("Attached finds an ended session")
	}
	if tb.Taken("e1", "mallory") || tb.Holds("e1") {
		t.Error("an ended session's id is still taken")
	}
	if held := tb.HeldBy(1); !slices.Equal(held, []sess{"Se2"}) {
		t.Errorf("HeldBy = %v, want only the live one", held)
	}
	if cwds := tb.Cwds("eve"); !slices.Equal(cwds, []string{"/w/e2"}) {
		t.Errorf("Cwds = %v", cwds)
	}
	if all := tb.All(); !slices.Equal(all, []sess{"Se2"}) || tb.Len() != 1 {
		t.Errorf("All = %v, Len = %d", all, tb.Len())
	}
	if n, m := tb.Room("eve"); n != 1 || m != 1 {
		t.Errorf("eve's room: %d sessions, %d MCP; want the live one's", n, m)
	}
	// Ended and never met: a refusal looks again.
	ended.Store(sess("Se2"), true)
	t.Cleanup(func() { ended.Delete(sess("Se2")) })
	if err := tb.Add("e3", "/w", "Se3", "eve", 1, 0, limit); err != nil {
		t.Fatal(err)
	}
	if err := tb.Add("e4", "/w", "Se4", "eve", 1, 0, limit); err != nil {
		t.Errorf("eve's room counts a session that ended: %v", err)
	}
	// Many sessions that end on their own and are never looked up: the
	// table keeps at most about as many as it has live.
	for i := range 1000 {
		s := sess(fmt.Sprintf("Sx%d", i))
		tb.Add(fmt.Sprintf("x%d", i), "/w", s, "", 1, 0, nil)
		ended.Store(s, true)
		t.Cleanup(func() { ended.Delete(s) })
	}
	tb.mu.Lock()
	n := len(tb.sessions)
	tb.mu.Unlock()
	if n > 2*2+2 {
		t.Errorf("the table keeps %d entries for 2 live sessions", n)
	}
}
