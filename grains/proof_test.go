package grains

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestProof: a proof covers every field of its message, its type and its
// recipient, and checks only with the key it was made with; the key is
// the owner's and the connection's.
func TestProof(t *testing.T) {
	conn := &grainspb.Conn{Address: "127.0.0.1:1", Id: "edge-x"}
	alice := testOwners.key("alice", conn)
	bob := testOwners.key("bob", conn)
	other := testOwners.key("alice", &grainspb.Conn{Address: "127.0.0.1:1", Id: "edge-y"})
	if testOwners.key("mallory", conn) != nil {
		t.Fatal("a key for an owner with no token")
	}
	call := func() *grainspb.Call {
		return &grainspb.Call{Conn: conn, Seq: 3, Owner: "alice", Method: "session/prompt", Id: []byte("7"), SessionId: "s1",
			Params: promptParams("s1", "hi")}
	}
	c := call()
	c.Proof = alice.prove(nil, c)
	if !alice.checks(nil, c) {
		t.Fatal("a proof does not check with its own key")
	}
	for name, k := range map[string]*secret{"bob's": bob, "another connection's": other, "none": nil} {
		if k.checks(nil, c) {
			t.Errorf("alice's proof checks with %s key", name)
		}
	}
	for name, change := range map[string]func(*grainspb.Call){
		"the session": func(c *grainspb.Call) { c.SessionId = "s2" },
		"the owner":   func(c *grainspb.Call) { c.Owner = "bob" },
		"the seq":     func(c *grainspb.Call) { c.Seq = 4 },
		"the text":    func(c *grainspb.Call) { c.Params = promptParams("s1", "ho") },
		"the conn":    func(c *grainspb.Call) { c.Conn = &grainspb.Conn{Address: "127.0.0.1:2", Id: "edge-x"} },
		"the caps":    func(c *grainspb.Call) { c.Caps = 1 },
	} {
		d := proto.Clone(c).(*grainspb.Call)
		change(d)
		if alice.checks(nil, d) {
			t.Errorf("the proof still checks with %s changed", name)
		}
	}
	// The type and the recipient are covered: a Credit's proof is not a
	// Delivered's, nor good for another link.
	link, link2 := actor.NewPID("127.0.0.1:3", "l1"), actor.NewPID("127.0.0.1:4", "l1")
	cr := &grainspb.Credit{SessionId: "", Bytes: 0}
	cr.Proof = alice.prove(link, cr)
	if !alice.checks(link, cr) || alice.checks(link2, cr) || alice.checks(link, &grainspb.Delivered{Proof: cr.Proof}) {
		t.Error("a credit's proof: not bound to its type and recipient")
	}
	// Checking leaves the message as it was (a message sent within a node
	// is its sender's).
	before := proto.Clone(c)
	_ = alice.checks(nil, c)
	if !proto.Equal(before, c) {
		t.Error("checking changed the message")
	}
}

// TestEveryMessageHasAProof: every message between an edge and a link
// or a session has a proof field; a proof field that appears twice, or a
// message that does not encode, checks nowhere.
func TestEveryMessageHasAProof(t *testing.T) {
	var proved []string
	msgs := grainspb.File_grains_proto.Messages()
	for i := range msgs.Len() {
		if md := msgs.Get(i); md.Fields().ByName(proofField) != nil {
			proved = append(proved, string(md.Name()))
		}
	}
	slices.Sort(proved)
	if want := []string{"Answer", "Call", "Cancel", "Credit", "Delivered", "Gone", "Outs"}; !slices.Equal(proved, want) {
		t.Errorf("messages with a proof: %v, want %v", proved, want)
	}
	k := testOwners.key("alice", &grainspb.Conn{Address: "a", Id: "b"})
	c := &grainspb.Credit{SessionId: "s", Bytes: 3}
	c.Proof = k.prove(nil, c)
	if !k.checks(nil, c) {
		t.Fatal("a credit's proof does not check")
	}
	// The same field once more, as unknown bytes after the known ones.
	twice := proto.Clone(c).(*grainspb.Credit)
	twice.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), c.Proof))
	if k.checks(nil, twice) {
		t.Error("a proof given twice checks")
	}
}

// TestGrainRefusesWhatNoOwnerProved: a session's grain takes a call only
// with its owner's proof: no proof, an owner no token names, a proof made
// with another owner's token, a proof of another session's call or of
// other params: each is refused, answered with why, logged, and runs
// nothing; a cancel or a client's end without the proof of the
// connection is dropped. The call that proves its owner is served.
func TestGrainRefusesWhatNoOwnerProved(t *testing.T) {
	testwait.Short(t, "a session grain's proofs (TestMember keeps a member's life in -short)")
	var out syncBuffer
	nodes, _ := testCluster(t, 1, &out)
	m := nodes[0].m
	e := &fakeEdge{answers: map[string]int{}, errors: map[string]string{}}
	conn := e.spawn(t, m)
	cwd := t.TempDir()
	open := func(sid, id string, seq uint64, owner string) *grainspb.Call {
		return &grainspb.Call{Conn: conn, Seq: seq, Owner: owner, Method: "session/new", Id: []byte(id), SessionId: sid,
			Params: []byte(fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, cwd))}
	}
	request := func(sid string, c *grainspb.Call) *grainspb.Accepted {
		t.Helper()
		res, err := m.Cluster().Request(sid, SessionKind, c, cluster.WithTimeout(testwait.Hang))
		a, ok := res.(*grainspb.Accepted)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.Method, res, err)
		}
		return a
	}
	sid, other := actors.NewSessionID(time.Now()), actors.NewSessionID(time.Now().Add(time.Second))
	bobs := func(c *grainspb.Call) *grainspb.Call {
		k := testOwners.key("bob", c.Conn)
		c.Proof = k.prove(nil, c)
		return c
	}
	elsewhere := signed(open(other, "5", 5, "alice"))
	changed := signed(open(sid, "6", 6, "alice"))
	changed.Params = []byte(`{"cwd":"/","mcpServers":[]}`)
	for _, tc := range []struct {
		what string
		to   string
		c    *grainspb.Call
		want string
	}{
		{"no proof", sid, open(sid, "1", 1, "alice"), `the proof of the owner "alice" does not check`},
		{"an owner no token names", sid, open(sid, "2", 2, "mallory"), `no token of this node's names the owner "mallory"`},
		{"alice's call with bob's proof", sid, bobs(open(sid, "3", 3, "alice")), `the proof of the owner "alice" does not check`},
		{"another session's call", sid, elsewhere, `it is for session "` + other + `"`},
		{"a proof of other params", sid, changed, `the proof of the owner "alice" does not check`},
	} {
		a := request(tc.to, tc.c)
		if !strings.Contains(a.Refused, tc.want) || a.Link != nil || a.Session != nil {
			t.Errorf("%s: accepted %+v, want refused: %s", tc.what, a, tc.want)
		}
	}
	if n := nodes[0].hub.Sessions(); n != 0 {
		t.Errorf("%d session(s) made by refused calls", n)
	}
	// Bob's own call on alice's connection is refused too, once the
	// connection is alice's here.
	a := request(sid, signed(open(sid, "7", 7, "alice")))
	if a.Refused != "" || a.Session == nil || a.Link == nil {
		t.Fatalf("alice's call: %+v", a)
	}
	waitFor(t, "session/new answered", func() bool { return e.count("7") > 0 })
	if a := request(sid, bobs(open(sid, "8", 8, "bob"))); !strings.Contains(a.Refused, `its connection is the owner "alice"'s`) {
		t.Errorf("bob's call on alice's connection: %+v", a)
	}
	// A cancel and a client's end without the connection's proof are
	// dropped; the link lives on (a Gone taken would close it).
	root := m.System().Root
	root.Send(pidOf(a.Session), &grainspb.Cancel{Conn: conn, SessionId: sid})
	root.Send(pidOf(a.Link), &grainspb.Gone{Conn: conn})
	root.Send(pidOf(a.Link), &grainspb.Answer{Failed: "forged"})
	waitFor(t, "the forgeries refused and logged", func() bool {
		return strings.Contains(out.String(), `refused a cancel of session "`+sid) &&
			strings.Contains(out.String(), "refused a *grainspb.Gone") && strings.Contains(out.String(), "refused a *grainspb.Answer")
	})
	if nodes[0].host.known(conn) == nil {
		t.Error("a forged Gone closed alice's link")
	}
	for _, id := range []string{"1", "2", "3", "5", "6", "8"} {
		if n := e.count(id); n != 0 {
			t.Errorf("refused call %s answered %d time(s)", id, n)
		}
	}
	if n := strings.Count(out.String(), "cluster: refused"); n < 6 {
		t.Errorf("%d refusals logged, want every one:\n%s", n, out.String())
	}
}

// BenchmarkProof: what a proof costs a message, made on one node and
// checked on the other: a prompt's call and a chunk of its answer.
//
//	go test -run '^$' -bench Proof ./grains
func BenchmarkProof(b *testing.B) {
	conn := &grainspb.Conn{Address: "127.0.0.1:4020", Id: "edge-ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
	k := testOwners.key("alice", conn)
	link := actor.NewPID("127.0.0.1:4021", "$42")
	b.Run("prompt call", func(b *testing.B) {
		c := &grainspb.Call{Conn: conn, Seq: 3, Owner: "alice", Method: "session/prompt", Id: []byte("7"), SessionId: "20261203-000000-0123abcd",
			Params: promptParams("20261203-000000-0123abcd", "ping")}
		for b.Loop() {
			c.Proof = nil
			c.Proof = k.prove(nil, c)
			if !k.checks(nil, c) {
				b.Fatal("does not check")
			}
		}
	})
	b.Run("chunk out", func(b *testing.B) {
		o := &grainspb.Outs{Link: &grainspb.Conn{Address: link.Address, Id: link.Id}, Node: "127.0.0.1:4021", Items: []*grainspb.Out{{SessionId: "20261203-000000-0123abcd",
			Item: &grainspb.Out_Chunk{Chunk: "pong, and a few more words of a reply"}, Cost: 37, MessageId: "m1"}}}
		for b.Loop() {
			o.Proof = nil
			o.Proof = k.prove(link, o)
			if !k.checks(link, o) {
				b.Fatal("does not check")
			}
		}
	})
}

// TestInProcessProof: a message made on a node for an actor at its own
// address carries the connection's in-process proof, which checks there
// and only there: not for an actor elsewhere, not on another node that
// holds the same tokens (a member that has the owner's token has not the
// node's own bytes), not for another connection; and bytes of the same
// length made up do not check.
func TestInProcessProof(t *testing.T) {
	tokens := map[string]string{"alice": "alice-token"}
	here, there := NewOwners(tokens), NewOwners(tokens)
	here.Here("10.0.0.1:7000")
	there.Here("10.0.0.2:7000")
	conn := &grainspb.Conn{Address: "10.0.0.1:7000", Id: "edge-x"}
	k, k2 := here.key("alice", conn), there.key("alice", conn)
	local, remote := actor.NewPID("10.0.0.1:7000", "link"), actor.NewPID("10.0.0.2:7000", "link")

	cr := &grainspb.Credit{SessionId: "s1", Bytes: 10}
	cr.Proof = k.prove(local, cr)
	if !k.checks(local, cr) {
		t.Fatal("the node's own proof does not check at its own address")
	}
	if k.checks(remote, cr) || k2.checks(remote, cr) {
		t.Error("the node's own proof checks for an actor on another node")
	}
	// The other node, with alice's token, makes its own proof for an
	// actor of its own, and sends it here: it does not check.
	forged := &grainspb.Credit{SessionId: "s1", Bytes: 10}
	forged.Proof = k2.prove(remote, forged)
	if k.checks(local, forged) {
		t.Error("another node's own proof checks here")
	}
	// What another node sends here is proved with the key: it checks.
	sent := &grainspb.Credit{SessionId: "s1", Bytes: 10}
	sent.Proof = k2.prove(local, sent)
	if len(sent.Proof) != 32 || !k.checks(local, sent) {
		t.Error("a proof made with the key on another node does not check here")
	}
	// It is the connection's: another connection's key, or another
	// owner's, does not take it.
	if here.key("alice", &grainspb.Conn{Address: "10.0.0.1:7000", Id: "edge-y"}).checks(local, cr) {
		t.Error("one connection's in-process proof checks for another connection")
	}
	if here.key("bob", conn) != nil {
		t.Fatal("a key for an owner with no token")
	}
	made := &grainspb.Credit{SessionId: "s1", Bytes: 10, Proof: make([]byte, 32)}
	if k.checks(local, made) {
		t.Error("32 zero bytes check as the node's own proof")
	}
	// Before the node knows its address, every proof is the key's.
	early := NewOwners(tokens).key("alice", conn)
	e := &grainspb.Credit{SessionId: "s1"}
	e.Proof = early.prove(local, e)
	if !k.checks(local, e) {
		t.Error("a proof made with the key before the address was known does not check")
	}
}
