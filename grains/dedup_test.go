package grains

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestCallSentAgainIsServedOnce: protoactor's cluster.Request sends a
// request again when its answer is late; a session's grain serves each
// call of a client connection once, however often it comes.
func TestCallSentAgainIsServedOnce(t *testing.T) {
	testwait.Short(t, "a session grain's calls sent again (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	m := nodes[0].m
	// The client's edge: it writes what the grain's virtual connection
	// sends, and says so.
	var wire syncBuffer
	edge := m.System().Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if l, ok := ctx.Message().(*grainspb.Lines); ok {
			_, _ = wire.Write(l.Data)
			ctx.Respond(&grainspb.Written{Seq: l.Seq})
		}
	}))
	defer m.System().Root.Stop(edge)
	conn := &grainspb.Conn{Address: edge.Address, Id: edge.Id}
	sid := string(actors.NewSessionID(time.Now()))
	send := func(c *grainspb.Call) {
		t.Helper()
		res, err := m.Cluster().Request(sid, SessionKind, c, cluster.WithTimeout(testwait.Hang))
		if a, ok := res.(*grainspb.Accepted); err != nil || !ok || a.Again {
			t.Fatalf("%s: %v %v", c.Method, res, err)
		}
	}
	answers := func(id string) int {
		n := 0
		for _, line := range strings.Split(wire.String(), "\n") {
			if gjson.Get(line, "id").Raw == id && !gjson.Get(line, "method").Exists() {
				n++
			}
		}
		return n
	}
	newSession := &grainspb.Call{Conn: conn, Seq: 1, Owner: "alice", Method: "session/new", Id: []byte("1"), SessionId: sid,
		Params: &grainspb.Call_Open{Open: &grainspb.Open{Cwd: t.TempDir(), McpServers: []byte("[]")}}}
	send(newSession)
	send(newSession)
	// A client knows its session's id once session/new has answered.
	waitFor(t, "session/new answered", func() bool { return answers("1") > 0 })
	prompt := &grainspb.Call{Conn: conn, Seq: 2, Owner: "alice", Method: "session/prompt", Id: []byte("2"), SessionId: sid,
		Params: &grainspb.Call_Prompt{Prompt: &grainspb.Prompt{Blocks: []*grainspb.Content{{Block: &grainspb.Content_Text{Text: &grainspb.Text{Text: "ping"}}}}}}}
	send(prompt)
	send(prompt)
	send(newSession) // late, behind the prompt
	waitFor(t, "the prompt answered", func() bool { return answers("2") > 0 })
	time.Sleep(300 * time.Millisecond) // what a second run would write by now
	if n1, n2 := answers("1"), answers("2"); n1 != 1 || n2 != 1 {
		t.Errorf("session/new answered %d times, the prompt %d times:\n%s", n1, n2, wire.String())
	}
	if n := strings.Count(wire.String(), `"pong"`); n != 1 {
		t.Errorf("the turn ran %d times:\n%s", n, wire.String())
	}
	if c := strings.Count(out.String(), fmt.Sprintf("session %s created", sid)); c != 1 {
		t.Errorf("the session was created %d times:\n%s", c, out.String())
	}
}

// TestEdgeWritesLinesOnce: the client's edge writes each Lines of a
// virtual connection once, however often it comes, answers every copy,
// and drops, still answering, what a node it does not count as a member
// sends (a stale copy of a session on a node counted out).
func TestEdgeWritesLinesOnce(t *testing.T) {
	testwait.Short(t, "the edge's Lines sent again (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	m := nodes[0].m
	var client syncBuffer
	answered := 0
	fw := nodes[0].edge.Forwarder("alice", nil)(&client, func(n int) { answered += n })
	defer fw.Close(testwait.Hang) // returns once its lanes are idle
	edge := fw.(*edgeConn).self
	from := &grainspb.Conn{Address: m.Address(), Id: "virtual-1"}
	send := func(node string, seq uint64, data string) {
		t.Helper()
		res, err := m.System().Root.RequestFuture(edge, &grainspb.Lines{From: from, Node: node, Seq: seq, Data: []byte(data)}, testwait.Hang).Result()
		if w, ok := res.(*grainspb.Written); err != nil || !ok || w.Seq != seq {
			t.Fatalf("Lines %d from %s: %v %v", seq, node, res, err)
		}
	}
	send("10.9.9.9:1", 1, `{"jsonrpc":"2.0","method":"session/update","params":{"stale":true}}`+"\n")
	send(m.Address(), 2, `{"jsonrpc":"2.0","method":"session/update","params":{"n":2}}`+"\n")
	send(m.Address(), 2, `{"jsonrpc":"2.0","method":"session/update","params":{"n":2}}`+"\n")
	send(m.Address(), 1, `{"jsonrpc":"2.0","method":"session/update","params":{"late":true}}`+"\n")
	send(m.Address(), 3, `{"jsonrpc":"2.0","method":"session/update","params":{"n":3}}`+"\n")
	if got, want := client.String(), `{"jsonrpc":"2.0","method":"session/update","params":{"n":2}}`+"\n"+`{"jsonrpc":"2.0","method":"session/update","params":{"n":3}}`+"\n"; got != want {
		t.Errorf("the client read:\n%s\nwant:\n%s", got, want)
	}
}
