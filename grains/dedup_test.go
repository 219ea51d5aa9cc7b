package grains

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
)

// fakeEdge is a client's edge actor that keeps what the sessions send it
// and gives their stream's bytes back at once, as a client's node of
// alice's.
type fakeEdge struct {
	k       *secret // alice's connection's key, once the edge has its actor
	mu      sync.Mutex
	answers map[string]int    // by JSON-RPC id
	errors  map[string]string // an error's message and data, by id
	text    strings.Builder
}

func (e *fakeEdge) receive(ctx actor.Context) {
	outs, ok := ctx.Message().(*grainspb.Outs)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range outs.Items {
		e.out(ctx, pidOf(outs.Link), m)
	}
}

func (e *fakeEdge) out(ctx actor.Context, link *actor.PID, m *grainspb.Out) {
	if m.Cost > 0 {
		c := &grainspb.Credit{SessionId: m.SessionId, Bytes: m.Cost}
		c.Proof = e.k.prove(link, c)
		ctx.Send(link, c)
	}
	switch it := m.Item.(type) {
	case *grainspb.Out_Response:
		e.answers[string(it.Response.Id)]++
		if r := it.Response.Error; r != nil && e.errors != nil {
			e.errors[string(it.Response.Id)] = r.Message + " " + string(r.Data)
		}
	case *grainspb.Out_Chunk:
		e.text.WriteString(it.Chunk)
	case *grainspb.Out_Deliver:
		d := &grainspb.Delivered{Number: it.Deliver}
		d.Proof = e.k.prove(link, d)
		ctx.Send(link, d)
	}
}

// spawn starts the edge's actor in m's system, and returns its name.
func (e *fakeEdge) spawn(t *testing.T, m *Member) *grainspb.Conn {
	t.Helper()
	edge := m.System().Root.Spawn(actor.PropsFromFunc(e.receive))
	t.Cleanup(func() { m.System().Root.Stop(edge) })
	conn := &grainspb.Conn{Address: edge.Address, Id: edge.Id}
	e.mu.Lock()
	e.k = testOwners.key("alice", conn)
	e.mu.Unlock()
	return conn
}

// signed is c with its proof, made with owner's token in testOwners.
func signed(c *grainspb.Call) *grainspb.Call {
	k := testOwners.key(c.Owner, c.Conn)
	c.Proof = k.prove(nil, c)
	return c
}

func (e *fakeEdge) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.answers[id]
}

// TestCallSentAgainIsServedOnce: protoactor's cluster.Request sends a
// request again when its answer is late; a session's grain serves each
// call of a client connection once, however often it comes. The grain is
// the session's actor: the Accepted names it, and it is where the
// session's turns run.
func TestCallSentAgainIsServedOnce(t *testing.T) {
	testwait.Short(t, "a session grain's calls sent again (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	m := nodes[0].m
	e := &fakeEdge{answers: map[string]int{}}
	conn := e.spawn(t, m)
	sid := actors.NewSessionID(time.Now())
	var grain *grainspb.Conn
	send := func(c *grainspb.Call) {
		t.Helper()
		res, err := m.Cluster().Request(sid, SessionKind, c, cluster.WithTimeout(testwait.Hang))
		a, ok := res.(*grainspb.Accepted)
		if err != nil || !ok || a.Again || a.Session == nil {
			t.Fatalf("%s: %v %v", c.Method, res, err)
		}
		if grain != nil && connKey(grain) != connKey(a.Session) {
			t.Errorf("%s accepted by %v, the session's by %v", c.Method, a.Session, grain)
		}
		grain = a.Session
	}
	newSession := signed(&grainspb.Call{Conn: conn, Seq: 1, Owner: "alice", Method: "session/new", Id: []byte("1"), SessionId: sid,
		Params: []byte(fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, t.TempDir()))})
	send(newSession)
	send(newSession)
	// A client knows its session's id once session/new has answered.
	waitFor(t, "session/new answered", func() bool { return e.count("1") > 0 })
	prompt := signed(&grainspb.Call{Conn: conn, Seq: 2, Owner: "alice", Method: "session/prompt", Id: []byte("2"), SessionId: sid,
		Params: promptParams(sid, "ping")})
	send(prompt)
	send(prompt)
	send(newSession) // late, behind the prompt
	waitFor(t, "the prompt answered", func() bool { return e.count("2") > 0 })
	time.Sleep(300 * time.Millisecond) // what a second run would write by now
	if n1, n2 := e.count("1"), e.count("2"); n1 != 1 || n2 != 1 {
		t.Errorf("session/new answered %d times, the prompt %d times", n1, n2)
	}
	e.mu.Lock()
	text := e.text.String()
	e.mu.Unlock()
	if text != "pong" {
		t.Errorf("the turns wrote %q, want one pong", text)
	}
	if c := strings.Count(out.String(), fmt.Sprintf("session %s created", sid)); c != 1 {
		t.Errorf("the session was created %d times:\n%s", c, out.String())
	}
	// The grain is the session's actor, as the hub's session table has it.
	if !nodes[0].hub.Holds(sid) || nodes[0].hub.Sessions() != 1 {
		t.Errorf("the hub holds %d session(s), %s among them: %v", nodes[0].hub.Sessions(), sid, nodes[0].hub.Holds(sid))
	}
}

// TestEdgeDropsAStaleNodesOutput: what a node the client's node does not
// count as a member sends (a stale copy of a session on a node counted
// out) is not written to the client, but its bytes are given back, so
// that the stale copy goes on to its end; a member's is written.
func TestEdgeDropsAStaleNodesOutput(t *testing.T) {
	testwait.Short(t, "the edge's way back (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	m := nodes[0].m
	c, ec := aliceOn(t, nodes[0])
	ctx := t.Context()
	edge := ec.self
	var mu sync.Mutex
	var credits []int64
	link := m.System().Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if cr, ok := ctx.Message().(*grainspb.Credit); ok {
			mu.Lock()
			credits = append(credits, cr.Bytes)
			mu.Unlock()
		}
	}))
	defer m.System().Root.Stop(link)
	me := &grainspb.Conn{Address: link.Address, Id: link.Id}
	root := m.System().Root
	send := func(node string, o ...*grainspb.Out) {
		m := &grainspb.Outs{Link: me, Node: node, Items: o}
		m.Proof = ec.k.prove(edge, m)
		root.Send(edge, m)
	}
	// Without the proof of alice's connection, nothing is written.
	root.Send(edge, &grainspb.Outs{Link: me, Node: m.Address(), Items: []*grainspb.Out{{SessionId: "s1", Item: &grainspb.Out_Chunk{Chunk: "forged"}}}})
	send("10.9.9.9:1", &grainspb.Out{SessionId: "s1", Cost: 5, Item: &grainspb.Out_Chunk{Chunk: "stale"}})
	send(m.Address(), &grainspb.Out{SessionId: "s1", Cost: 5, Item: &grainspb.Out_Chunk{Chunk: "fresh"}},
		&grainspb.Out{SessionId: "s1", Item: &grainspb.Out_Update{Update: []byte(`{"sessionUpdate":"current_mode_update","currentModeId":"ask"}`)}})
	if err := c.Client.WaitUpdate(ctx, "s1", func(u acp.SessionUpdate) bool { return u.CurrentModeUpdate != nil }); err != nil {
		t.Fatal(err)
	}
	if got := acptest.Text(c.Client.Updates("s1")); got != "fresh" {
		t.Errorf("the client read %q, want fresh", got)
	}
	if !strings.Contains(out.String(), "refused a *grainspb.Outs for alice's connection") {
		t.Errorf("the forged output was not logged:\n%s", out.String())
	}
	// Their bytes go back with those of what follows, once a batch is
	// written: one Credit for the three.
	rest := int64(actors.CreditBatch - 10)
	send(m.Address(), &grainspb.Out{SessionId: "s1", Cost: rest, Item: &grainspb.Out_Chunk{Chunk: " and more"}})
	waitFor(t, "the batch's bytes given back", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(credits) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(credits) != 1 || credits[0] != actors.CreditBatch {
		t.Errorf("the edge gave back %v, want one Credit of %d", credits, actors.CreditBatch)
	}
}

// TestGrainTakesItsNodesRoots: the folders a session may be in are its
// node's own (serve.roots), whatever the client's node sends: a call can
// name no roots, and a cwd outside this node's is refused.
func TestGrainTakesItsNodesRoots(t *testing.T) {
	testwait.Short(t, "a session grain's roots (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	root, outside := t.TempDir(), t.TempDir()
	nodes[0].host.roots = []string{root}
	m := nodes[0].m
	e := &fakeEdge{answers: map[string]int{}, errors: map[string]string{}}
	conn := e.spawn(t, m)
	for i, cwd := range []string{outside, root} {
		sid := actors.NewSessionID(time.Now())
		id := fmt.Sprint(i + 1)
		c := signed(&grainspb.Call{Conn: conn, Seq: uint64(i + 1), Owner: "alice", Method: "session/new", Id: []byte(id), SessionId: sid,
			Params: []byte(fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, cwd))})
		if _, err := m.Cluster().Request(sid, SessionKind, c, cluster.WithTimeout(testwait.Hang)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "session/new answered", func() bool { return e.count(id) > 0 })
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if why := e.errors["1"]; !strings.Contains(why, "outside the folders this server serves") {
		t.Errorf("a cwd outside the node's roots: %q", why)
	}
	if why, ok := e.errors["2"]; ok {
		t.Errorf("a cwd inside the node's roots: %q", why)
	}
}

// TestPromptGoesStraight: a prompt to a session whose actor the edge
// knows goes straight to it, and the node says it took it with what the
// session writes (no Accepted, no request of the cluster's); when that
// actor is gone, the prompt comes back as protoactor's dead letter and is
// sent again through the cluster, which finds the session anew (from the
// store), in its order. The edge is made to wait for no clock here: only
// the dead letter sends it again.
func TestPromptGoesStraight(t *testing.T) {
	testwait.Short(t, "a session grain's prompts (TestMember keeps a member's life in -short)")
	defer func(d time.Duration) { straightWait = d }(straightWait)
	straightWait = time.Hour
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	c, ec := aliceOn(t, nodes[0])
	ctx := t.Context()
	res, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.SessionId
	counts := func() (taken, again int) {
		ec.mu.Lock()
		defer ec.mu.Unlock()
		return ec.taken, ec.again
	}
	ask := func(what string) {
		t.Helper()
		c.Client.Reset()
		ctx, cancel := context.WithTimeout(ctx, testwait.Hang)
		defer cancel()
		if res, err := c.Ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn || acptest.Text(c.Client.Updates(sid)) != "pong" {
			t.Fatalf("%s: %v %v %q", what, res, err, acptest.Text(c.Client.Updates(sid)))
		}
	}
	proved := nodes[0].host.proved.Load()
	for i := range 3 {
		ask(fmt.Sprintf("prompt %d", i+1))
	}
	if taken, again := counts(); taken != 3 || again != 0 {
		t.Errorf("after three prompts: %d taken straight, %d sent again; want 3 and 0", taken, again)
	}
	// Sent within the process, a prompt needs no proof: no other node
	// can send what it is (localCall).
	if n := nodes[0].host.proved.Load() - proved; n != 0 {
		t.Errorf("%d proofs checked for three prompts sent straight in one process, want none", n)
	}
	// The session is on the client's own node: what it wrote went to the
	// client's connection there and then, not as Outs through the edge
	// actor (no message, proof or actor between).
	if n := ec.outsIn.Load(); n != 0 {
		t.Errorf("the edge took %d Outs from a session on its own node, want none", n)
	}
	// The session's actor goes (as the cluster stops a grain); the edge
	// still names it.
	ec.mu.Lock()
	pid := ec.sessions[string(sid)]
	ec.mu.Unlock()
	if pid == nil {
		t.Fatal("the edge knows no actor of the session")
	}
	if err := nodes[0].m.System().Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	proved = nodes[0].host.proved.Load()
	ask("the prompt after the session's actor went")
	if _, again := counts(); again != 1 {
		t.Errorf("the prompt to the actor that went was sent again %d times, want once", again)
	}
	// Sent again through the cluster, it is a copy, proved.
	if n := nodes[0].host.proved.Load() - proved; n != 1 {
		t.Errorf("%d proofs checked for the prompt sent again through the cluster, want 1", n)
	}
	ask("the prompt after that")
	if taken, _ := counts(); taken != 4 {
		t.Errorf("%d prompts taken straight in all, want 4: the one after the session came back goes straight too", taken)
	}
}

// aliceOn connects a client of alice's to node nd's hub, initialized, its
// sessions forwarded by nd's edge, and returns it with its edge's
// connection.
func aliceOn(t *testing.T, nd *node) (*acptest.Conn, *edgeConn) {
	t.Helper()
	made := make(chan *edgeConn, 1)
	c := acptest.OnHub(nd.hub, protocol.ConnOptions{Owner: "alice", Forward: func(sink protocol.Sink) protocol.Forwarder {
		f := nd.edge.Forwarder("alice")(sink)
		made <- f.(*edgeConn)
		return f
	}})
	t.Cleanup(func() { _ = c.Close(testwait.Hang) })
	if _, err := c.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c, <-made
}
