package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
)

// grantLog is a stand-in for session actors: it records the slots the
// serializer grants, in order.
type grantLog struct {
	mu     sync.Mutex
	cond   *sync.Cond
	grants []uint64
}

func newGrantLog() *grantLog {
	g := &grantLog{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *grantLog) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*slotGranted); ok {
		g.mu.Lock()
		g.grants = append(g.grants, m.Turn)
		g.mu.Unlock()
		g.cond.Broadcast()
	}
}

// wait returns the grants once there are n, or fails after the hang bound.
func (g *grantLog) wait(t *testing.T, n int) []uint64 {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	stop := time.AfterFunc(testwait.Hang, g.cond.Broadcast)
	defer stop.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.grants) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d grant(s) after %v, want %d: %v", len(g.grants), testwait.Hang, n, g.grants)
		}
		g.cond.Wait()
	}
	return append([]uint64(nil), g.grants...)
}

// TestTurnSerializer drives the serializer alone with one slot: turns of
// several sessions are granted first come, first served; a queued turn that
// is released leaves the queue; a panic inside it loses no queued turn.
func TestTurnSerializer(t *testing.T) {
	rt, _ := newTestRuntime(t, "rules: []\n")
	root := rt.Root()
	turns := rt.spawnTurns(1)
	g := newGrantLog()
	sessions := make([]*actor.PID, 4)
	for i := range sessions {
		sessions[i] = root.Spawn(rt.props(func() actor.Actor { return g }))
	}
	acquire := func(turn uint64, s *actor.PID) { root.Send(turns, &acquireSlot{Turn: turn, Session: s}) }
	release := func(turn uint64) { root.Send(turns, &releaseSlot{Turn: turn}) }

	// FIFO across sessions, one at a time.
	acquire(1, sessions[0])
	acquire(2, sessions[1])
	acquire(3, sessions[2])
	acquire(4, sessions[3])
	if got := g.wait(t, 1); got[0] != 1 {
		t.Fatalf("grants %v", got)
	}
	release(3) // cancelled while queued: it leaves the queue
	release(1)
	g.wait(t, 2)
	release(2)
	got := g.wait(t, 3)
	if got[1] != 2 || got[2] != 4 {
		t.Fatalf("grants %v, want 1 2 4", got)
	}

	// A panic inside: a malformed request (no session to answer) reaches
	// the head of the queue while turns wait behind it.
	acquire(5, sessions[0])
	root.Send(turns, &acquireSlot{Turn: 6})
	acquire(7, sessions[1])
	acquire(8, sessions[2])
	release(4)
	if got := g.wait(t, 4); got[3] != 5 {
		t.Fatalf("grants %v", got)
	}
	release(5) // turn 6 is granted to nobody: the serializer panics
	got = g.wait(t, 5)
	if got[4] != 7 {
		t.Fatalf("after the panic: grants %v, want 7 next", got)
	}
	release(7)
	if got := g.wait(t, 6); got[5] != 8 {
		t.Fatalf("after the panic: grants %v, want 8 next", got)
	}
	for _, s := range sessions {
		_ = root.StopFuture(s).Wait()
	}
	_ = root.StopFuture(turns).Wait()
}

// busy keeps its mailbox full: each message sends the next, until stop.
type busy struct{ stop *atomic.Bool }

type tick struct{}

func (b *busy) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*tick); ok && !b.stop.Load() {
		ctx.Send(ctx.Self(), &tick{})
	}
}

// stopper stops the busy actors when it runs.
type stopper struct{ stop *atomic.Bool }

func (s *stopper) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(string); ok {
		s.stop.Store(true)
		ctx.Respond("stopped")
	}
}

// TestNoActorHoldsTheOthers: mailboxes that never empty do not keep an
// unrelated actor from running.
func TestNoActorHoldsTheOthers(t *testing.T) {
	rt, _ := newTestRuntime(t, "rules: []\n")
	root := rt.Root()
	var stop atomic.Bool
	var pids []*actor.PID
	for i := 0; i < 32; i++ {
		pid := root.Spawn(rt.props(func() actor.Actor { return &busy{stop: &stop} }))
		root.Send(pid, &tick{})
		pids = append(pids, pid)
	}
	s := root.Spawn(rt.props(func() actor.Actor { return &stopper{stop: &stop} }))
	pids = append(pids, s)
	res, err := root.RequestFuture(s, "stop", testwait.Hang).Result()
	if err != nil || res != "stopped" {
		stop.Store(true)
		t.Fatalf("the unrelated actor did not run while others were busy: %v %v", res, err)
	}
	for _, pid := range pids {
		_ = root.StopFuture(pid).Wait()
	}
}

// TestCallKey: the loop detector counts calls equal but for spacing and
// key order as the same call.
func TestCallKey(t *testing.T) {
	a := callKey(history.ToolCall{Name: "bash", Arguments: `{"command":"ls","timeout":5}`})
	b := callKey(history.ToolCall{Name: "bash", Arguments: "{ \"timeout\": 5,\n \"command\": \"ls\" }"})
	c := callKey(history.ToolCall{Name: "bash", Arguments: `{"command":"ls -a"}`})
	d := callKey(history.ToolCall{Name: "read_file", Arguments: `{"command":"ls","timeout":5}`})
	if a != b || a == c || a == d {
		t.Errorf("keys: %q %q %q %q", a, b, c, d)
	}
}

// TestTurnsGoRoundTheOwners: the next turn is the oldest of the owner
// served least lately; ahead counts the turns before each as the slots
// would go if no other turn came; a turn removed leaves the order.
func TestTurnsGoRoundTheOwners(t *testing.T) {
	w := func(turn uint64, owner string) waiting {
		return waiting{acquireSlot: acquireSlot{Turn: turn, Owner: owner}}
	}
	for _, tc := range []struct {
		name   string
		queue  []waiting
		served map[string]uint64
		order  []uint64
	}{
		{"one owner: first come, first served", []waiting{w(1, ""), w(2, ""), w(3, "")}, nil, []uint64{1, 2, 3}},
		{"an owner never served goes first", []waiting{w(1, "a"), w(2, "a"), w(3, "b")}, map[string]uint64{"a": 4}, []uint64{3, 1, 2}},
		{"round the owners", []waiting{w(1, "a"), w(2, "a"), w(3, "a"), w(4, "b"), w(5, "c"), w(6, "b")}, nil, []uint64{1, 4, 5, 2, 6, 3}},
		{"the one served longest ago", []waiting{w(1, "a"), w(2, "b")}, map[string]uint64{"a": 9, "b": 3}, []uint64{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q fairQueue
			for _, x := range tc.queue {
				q.push(x)
			}
			for o, v := range tc.served {
				q.served[o] = v
				q.tick = max(q.tick, v)
			}
			a := q.ahead()
			for n, turn := range tc.order {
				if a[turn] != n {
					t.Errorf("turn %d has %d ahead, want %d (%v)", turn, a[turn], n, a)
				}
			}
			for _, want := range tc.order {
				if got, ok := q.pop(); !ok || got.Turn != want {
					t.Fatalf("popped %d (%v), want %d", got.Turn, ok, want)
				}
			}
			if _, ok := q.pop(); ok || q.len() != 0 {
				t.Errorf("%d left", q.len())
			}
		})
	}
	var q fairQueue
	q.push(w(1, "a"))
	q.push(w(2, "b"))
	q.push(w(3, "a"))
	if !q.remove(1) || q.remove(1) {
		t.Fatal("remove")
	}
	if got, _ := q.pop(); got.Turn != 2 {
		t.Errorf("after a removal: %d, want 2", got.Turn)
	}
}
