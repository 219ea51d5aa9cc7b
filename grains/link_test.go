package grains

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/grains/grainspb"
)

// TestLinkSendsWhatWaitsInOneOuts: what a link's sessions write while
// its actor has a flush on the way goes in that flush, as one Outs, in
// the order written, with the proof of the connection; a flush larger
// than outsBytes is cut into several, the order kept; and a link sends
// nothing once its client is gone.
func TestLinkSendsWhatWaitsInOneOuts(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	var mu sync.Mutex
	var got []*grainspb.Outs
	edge := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*grainspb.Outs); ok {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		}
	}))
	k := testOwners.key("alice", &grainspb.Conn{Address: edge.Address, Id: edge.Id})
	l := &link{k: k, edge: edge, sys: sys, node: "n1", gone: make(chan struct{}),
		debts: map[string]*debt{}, delivers: map[uint64]delivery{}}
	l.self = sys.Root.Spawn(actor.PropsFromFunc(l.receive))
	l.me = &grainspb.Conn{Address: l.self.Address, Id: l.self.Id}
	outs := func(want int) []*grainspb.Outs {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d Outs", want), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= want
		})
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
	texts := func(os []*grainspb.Outs) string {
		var b []string
		for _, o := range os {
			if !k.checks(edge, o) || o.Node != "n1" || o.Link.GetId() != l.self.Id {
				t.Errorf("Outs without the link's proof, node or name: %v", o)
			}
			for _, it := range o.Items {
				b = append(b, it.SessionId+":"+it.GetChunk())
			}
		}
		return strings.Join(b, " ")
	}
	// Written while a flush is on its way (held here: the flush is
	// sent once all is written).
	l.flushing = true
	for i := range 5 {
		l.send(fmt.Sprintf("s%d", i%2), &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: fmt.Sprint(i)}})
	}
	sys.Root.Send(l.self, flushOuts{})
	if os := outs(1); len(os) != 1 || texts(os) != "s0:0 s1:1 s0:2 s1:3 s0:4" {
		t.Errorf("five updates written while a flush was on its way: %d Outs, %q", len(os), texts(os))
	}
	// One alone goes at once.
	l.send("s0", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: "alone"}})
	if os := outs(1); len(os) != 1 || texts(os) != "s0:alone" {
		t.Errorf("an update alone: %d Outs, %q", len(os), texts(os))
	}
	// More than outsBytes: cut, in order.
	big := strings.Repeat("x", outsBytes/3)
	l.mu.Lock()
	l.flushing = true
	l.mu.Unlock()
	for range 3 {
		l.send("s0", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: big}})
	}
	l.send("s0", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: "last"}})
	sys.Root.Send(l.self, flushOuts{})
	os := outs(2)
	n := 0
	for _, o := range os {
		n += len(o.Items)
	}
	if len(os) != 2 || n != 4 || os[1].Items[len(os[1].Items)-1].GetChunk() != "last" {
		t.Errorf("%d bytes written while a flush was on its way: %d Outs of %d items in all", 3*len(big), len(os), n)
	}
	// A usage_update goes as its two figures (Out.usage), so that the
	// edge hands it to the connection's outbox typed, which writes the
	// last of a session's run of them, as it does a local session's.
	usage := func(sid string, used int) {
		l.Update(sid, acp.SessionUpdate{UsageUpdate: &acp.SessionUsageUpdate{Used: used, Size: 100}})
	}
	l.mu.Lock()
	l.flushing = true
	l.mu.Unlock()
	usage("s0", 1)
	l.send("s1", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: "between"}})
	usage("s0", 2)
	usage("s1", 3)
	l.send("s1", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: "after"}})
	usage("s1", 4)
	sys.Root.Send(l.self, flushOuts{})
	var items []string
	for _, o := range outs(1) {
		for _, it := range o.Items {
			switch {
			case it.GetUsage() != nil:
				items = append(items, fmt.Sprintf("%s:used=%d/%d", it.SessionId, it.GetUsage().Used, it.GetUsage().Size))
			default:
				items = append(items, it.SessionId+":"+it.GetChunk())
			}
		}
	}
	if got := strings.Join(items, " "); got != "s0:used=1/100 s1:between s0:used=2/100 s1:used=3/100 s1:after s1:used=4/100" {
		t.Errorf("usage updates written while a flush was on its way: %s", got)
	}
	// Gone (as close marks it): nothing more is kept.
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.send("s0", &grainspb.Out{Item: &grainspb.Out_Chunk{Chunk: "late"}})
	l.mu.Lock()
	left := len(l.outs)
	l.mu.Unlock()
	if left != 0 {
		t.Errorf("a closed link kept %d updates", left)
	}
}
