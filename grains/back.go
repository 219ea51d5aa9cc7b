package grains

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/grains/grainspb"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/protocol"
)

// The way back (edge side): what a connection's sessions write on the
// nodes that run them comes to its edge's PID, typed, and goes through the
// connection's ordered outbox; their questions go to the client as mm's
// own calls, and the answers back to the session's link (link.go).

// asked is a session's question to the client as the connection's table
// of mm's calls keeps it (its note: Sink.AskNoted): the link that put it
// and the actor that waits for its answer. The edge keeps no table of its
// own.
type asked struct {
	link  *actor.PID
	reply *actor.PID
}

// askedBy says whether note is a question link put (nil: any link's) on
// the node of an address in nodes (nil: any node), or the one whose
// waiter is reply (nil: any).
func askedBy(link, reply *actor.PID, nodes []string) func(note any) bool {
	return func(note any) bool {
		a, ok := note.(*asked)
		switch {
		case !ok:
			return false
		case link != nil && !a.link.Equal(link):
			return false
		case reply != nil && !a.reply.Equal(reply):
			return false
		case nodes != nil && !slices.Contains(nodes, a.link.Address):
			return false
		}
		return true
	}
}

// edgeProcess is a client connection's PID in its node's actor system
// (its edge): what the connection's sessions send it from their nodes is
// taken there and then, on the goroutine that brought it, as protoactor's
// futures take their answers. From another node, that is the reader of
// that node's stream, which keeps the stream's order; no mailbox, and no
// goroutine to wake, stands between a session's answer and its client.
// receive never waits: the outbox queues, a question's answer is waited
// for on a goroutine of its own.
type edgeProcess struct{ c *edgeConn }

func (p edgeProcess) SendUserMessage(_ *actor.PID, m any) {
	if env, ok := m.(*actor.MessageEnvelope); ok {
		m = env.Message
	}
	if p.c.stopped.Load() {
		return // the client is gone (Close): a message late for it
	}
	p.c.receive(m)
}

func (edgeProcess) SendSystemMessage(*actor.PID, any) {}
func (edgeProcess) Stop(*actor.PID)                   {}

// receive takes what the connection's sessions send from their nodes; it
// never waits on the client. Nothing is taken whose proof does not check
// with the connection's key: only a node that holds the owner's token
// writes to the client.
func (c *edgeConn) receive(msg any) {
	var m *grainspb.Outs
	switch msg := msg.(type) {
	case *grainspb.Outs:
		m = msg
	case *grainspb.Accepted, *actor.DeadLetterResponse:
		c.straightAnswered(msg) // about a prompt sent straight (edge.go)
		return
	default:
		return
	}
	c.outsIn.Add(1)
	if !c.k.checks(c.self, m) {
		c.e.refused.say(fmt.Sprintf("a %T for %s's connection %s: its proof does not check (made without the key of the connection)", m, c.owner, c.self.Id))
		return
	}
	link, stale := pidOf(m.Link), !c.e.m.isMember(m.Node)
	for _, o := range m.Items {
		c.out(link, stale, o)
	}
}

// out puts one thing a session wrote in the connection's outbox. What a
// node this one counts out still sends (stale) is a stale copy's (its
// sessions were taken over elsewhere): it is not written, but answered
// as if it were, so that the stale copy ends its turn and fails its save.
func (c *edgeConn) out(link *actor.PID, stale bool, m *grainspb.Out) {
	root := c.e.m.System().Root
	sid := m.SessionId
	var paid protocol.Giver
	if m.Cost > 0 {
		paid = credit{c: c, link: link, sid: sid}
	}
	if stale {
		if paid != nil {
			paid.Give(int(m.Cost))
		}
		switch it := m.Item.(type) {
		case *grainspb.Out_Ask:
			if to := replyTo(link, it.Ask); to != nil {
				a := &grainspb.Answer{Failed: "this node is no longer a member of the cluster"}
				a.Proof = c.k.prove(to, a)
				root.Send(to, a)
			}
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
	case *grainspb.Out_Usage:
		c.sink.Usage(sid, int(it.Usage.GetUsed()), int(it.Usage.GetSize()))
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
	case *grainspb.Out_Abandon:
		c.sink.Abandon(askedBy(link, pidOf(it.Abandon), nil))
	case *grainspb.Out_Accepted:
		c.acceptedStraight(sid, it.Accepted)
	}
}

// replyTo is where the answer to a goes: the actor its link named, which
// must be on the link's node (nil when it is not, or none is named).
func replyTo(link *actor.PID, a *grainspb.Ask) *actor.PID {
	if a.ReplyTo == nil || a.ReplyTo.Address != link.Address {
		return nil
	}
	return pidOf(a.ReplyTo)
}

// ask puts a session's question to the client in the outbox now, in the
// session's order, and sends the client's answer back to the actor that
// waits for it on the session's node once it comes, off the actor.
func (c *edgeConn) ask(link *actor.PID, sid string, a *grainspb.Ask) {
	to := replyTo(link, a)
	if to == nil {
		c.e.refused.say(fmt.Sprintf("a question of %s's connection %s names no actor of its link's node %s to answer", c.owner, c.self.Id, link.Address))
		return
	}
	wait := c.sink.AskNoted(sid, a.Method, nullable(a.Params), &asked{link: link, reply: to})
	root := c.e.m.System().Root
	go func() {
		res, err := wait(context.Background())
		answer := &grainspb.Answer{Result: res}
		var rerr *acp.RequestError
		switch {
		case errors.Is(err, jsonrpc.ErrAbandoned):
			return // abandoned by the session, or its node is lost
		case errors.As(err, &rerr):
			answer.Error = wireError(rerr)
		case err != nil:
			answer.Failed = err.Error()
		}
		answer.Proof = c.k.prove(to, answer)
		root.Send(to, answer)
	}()
}

// credit gives the bytes of a session's written update back to its
// budget, on the session's node, through the connection's tally (owe).
type credit struct {
	c    *edgeConn
	link *actor.PID
	sid  string
}

func (cr credit) Give(n int) { cr.c.owe(cr.link, cr.sid, n) }

// owed is what the edge wrote of a session's stream and has not given
// back yet, and the link whose session's budget it goes back to.
type owed struct {
	link  *actor.PID
	bytes int64
}

// owe counts n written bytes of session sid's stream, whose budget is on
// link's node, and gives them back (Credit) once they reach a batch
// (actors.CreditBatch): one message for the updates of many turns rather
// than one for each. What it holds back never stalls the session: a
// delta that does not fit waits only until less than a batch is held
// (actors.Budget), and the link gives back the whole debt when the client
// goes.
func (c *edgeConn) owe(link *actor.PID, sid string, n int) {
	c.owedMu.Lock()
	o := c.owed[sid]
	if o.link == nil || !o.link.Equal(link) {
		// The session answers from another node now: what its old
		// budget lent is that budget's, gone with its actor.
		o = owed{link: link}
	}
	o.bytes += int64(n)
	if o.bytes < actors.CreditBatch {
		c.owed[sid] = o
		c.owedMu.Unlock()
		return
	}
	delete(c.owed, sid)
	c.owedMu.Unlock()
	m := &grainspb.Credit{SessionId: sid, Bytes: o.bytes}
	m.Proof = c.k.prove(link, m)
	c.e.m.System().Root.Send(link, m)
}

// forgetOwed drops what is held for session sid: it has ended, and its
// budget with it.
func (c *edgeConn) forgetOwed(sid string) {
	c.owedMu.Lock()
	delete(c.owed, sid)
	c.owedMu.Unlock()
}
