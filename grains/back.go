package grains

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/protocol"
)

// The way back (edge side): what a connection's sessions write on the
// nodes that run them comes to its edge actor, typed, and goes through the
// connection's ordered outbox; their questions go to the client as mm's
// own calls, and the answers back to the session's link (link.go).

// askKey names a session's question to the client: its link's and its
// number there.
type askKey struct {
	link   string
	number uint64
}

// receive takes what the connection's sessions send from their nodes; the
// actor never waits on the client. Nothing is taken whose proof does not
// check with the connection's key: only a node that holds the owner's
// token writes to the client.
func (c *edgeConn) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *grainspb.Out, *grainspb.Abandon:
		if !c.k.checks(ctx.Self(), m.(proto.Message)) {
			c.e.refused.say(fmt.Sprintf("a %T for %s's connection %s: its proof does not check (made without the key of the connection)", m, c.owner, c.self.Id))
			return
		}
	}
	switch m := ctx.Message().(type) {
	case *grainspb.Out:
		c.out(m)
	case *grainspb.Abandon:
		c.mu.Lock()
		k := askKey{link: connKey(m.Link), number: m.Number}
		cancel := c.asks[k]
		delete(c.asks, k)
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
}

// out puts one thing a session wrote in the connection's outbox. What a
// node this one counts out still sends is a stale copy's (its sessions
// were taken over elsewhere): it is not written, but answered as if it
// were, so that the stale copy ends its turn and fails its save.
func (c *edgeConn) out(m *grainspb.Out) {
	root := c.e.m.System().Root
	link, sid := pidOf(m.Link), m.SessionId
	var paid protocol.Giver
	if m.Cost > 0 {
		paid = credit{root: root, link: link, sid: sid, k: c.k}
	}
	if !c.e.m.isMember(m.Node) {
		if paid != nil {
			paid.Give(int(m.Cost))
		}
		switch it := m.Item.(type) {
		case *grainspb.Out_Ask:
			a := &grainspb.Answer{Number: it.Ask.Number, Failed: "this node is no longer a member of the cluster"}
			a.Proof = c.k.prove(link, a)
			root.Send(link, a)
		case *grainspb.Out_Deliver:
			d := &grainspb.Delivered{Number: it.Deliver}
			d.Proof = c.k.prove(link, d)
			root.Send(link, d)
		}
		return
	}
	switch it := m.Item.(type) {
	case *grainspb.Out_Chunk:
		c.sink.Chunk(sid, it.Chunk, m.MessageId, false, paid, int(m.Cost))
	case *grainspb.Out_Thought:
		c.sink.Chunk(sid, it.Thought, m.MessageId, true, paid, int(m.Cost))
	case *grainspb.Out_Update:
		c.sink.Update(sid, it.Update, paid, int(m.Cost))
	case *grainspb.Out_Deliver:
		d := &grainspb.Delivered{Number: it.Deliver}
		d.Proof = c.k.prove(link, d)
		c.sink.Deliver(sid, link, d)
	case *grainspb.Out_Response:
		id, ok := jsonrpc.IDOf(it.Response.Id)
		var r *request
		if ok {
			r = c.noted(id)
		}
		if r == nil || !c.take(r) {
			return // answered here already (its node was counted lost)
		}
		var rerr *acp.RequestError
		if e := it.Response.Error; e != nil {
			rerr = requestError(e)
		}
		c.sink.Answer(sid, r.r, nullable(it.Response.Result), rerr)
	case *grainspb.Out_Ask:
		c.ask(link, sid, it.Ask)
	}
}

// ask puts a session's question to the client in the outbox now, in the
// session's order, and sends the client's answer back to the session's
// link once it comes, off the actor.
func (c *edgeConn) ask(link *actor.PID, sid string, a *grainspb.Ask) {
	wait := c.sink.Ask(sid, a.Method, nullable(a.Params))
	ctx, cancel := context.WithCancel(context.Background())
	k := askKey{link: link.Address + "/" + link.Id, number: a.Number}
	c.mu.Lock()
	c.asks[k] = cancel
	c.mu.Unlock()
	root := c.e.m.System().Root
	go func() {
		res, err := wait(ctx)
		abandoned := ctx.Err() != nil
		c.mu.Lock()
		delete(c.asks, k)
		c.mu.Unlock()
		cancel()
		answer := &grainspb.Answer{Number: a.Number, Result: res}
		var rerr *acp.RequestError
		switch {
		case errors.As(err, &rerr):
			answer.Error = wireError(rerr)
		case err != nil && abandoned:
			return // abandoned by the session, or its node is lost
		case err != nil:
			answer.Failed = err.Error()
		}
		answer.Proof = c.k.prove(link, answer)
		root.Send(link, answer)
	}()
}

// credit gives the bytes of a session's written update back to its
// budget, on the session's node.
type credit struct {
	root *actor.RootContext
	link *actor.PID
	sid  string
	k    *secret // the connection's key
}

func (c credit) Give(n int) {
	m := &grainspb.Credit{SessionId: c.sid, Bytes: int64(n)}
	m.Proof = c.k.prove(c.link, m)
	c.root.Send(c.link, m)
}
