package grains

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/mm-agent/mm/grains/grainspb"
)

// A turn's prompt to a session whose actor the edge knows goes straight
// to that actor (edgeConn.send), and the session's node says it took it
// in the link's Outs (Out.accepted): what follows here is that way, and
// what sends a prompt that was not taken again through the cluster.

// straightCall is a prompt sent straight to its session's actor, the
// edge's PID its sender, rather than through a request of the cluster's
// that waits for its Accepted: on a session that the edge knows (a call
// before it was accepted there), a turn's call crosses once, and its
// acceptance comes back with what the session writes. One that was not
// taken is sent again through the cluster, in the lane's order: its
// node answers Accepted (again, refused) to the edge's PID, or nothing
// comes back within straightWait (the actor was gone: protoactor's dead
// letter, or the message lost). Sent again, it has its seq, which a
// session that took it serves once.
type straightCall struct {
	call  *grainspb.Call
	r     *request
	to    *actor.PID
	sent  time.Time
	timer *time.Timer
}

// localCall is a prompt sent straight to its session's actor in the
// client's own process (the session lives on the client's node): a Go
// value, which protoactor's remote neither encodes nor decodes, so no
// other node can send one. It carries no proof, and its actor checks
// none: its connection's key, owner and session are checked as a call's.
// Sent again through the cluster (lostStraight), it is a copy, proved.
type localCall struct{ c *grainspb.Call }

// straightTo is what a prompt sent straight to actor to is: a localCall
// when to is in this process, else call, proved here first.
func (c *edgeConn) straightTo(to *actor.PID, call *grainspb.Call) any {
	if to.Address == c.e.m.Address() {
		return &localCall{c: call}
	}
	if len(call.Proof) == 0 {
		call.Proof = c.k.prove(nil, call)
	}
	return call
}

// sendStraight sends msg (straightTo's) to the session's actor to, the
// edge's PID its sender: by the stream of to's node when it is up
// (stream.go), else through the remote.
func (c *edgeConn) sendStraight(to *actor.PID, msg any) {
	if call, ok := msg.(*grainspb.Call); ok {
		if p := c.e.m.streamTo(to.Address); p != nil {
			if p.send(streamCall, to.Id, call) == nil {
				return
			}
			// The connection broke: the prompt goes through the remote
			// (its session serves its seq once, were it taken twice).
		}
	}
	c.e.m.System().Root.RequestWithCustomSender(to, msg, c.self)
}

// straightWait is how long the edge waits for the session's node to say
// it took a prompt sent straight before it sends it again through the
// cluster, as long as a request of the cluster's waits for its answer (a
// variable for the tests).
var straightWait = 2 * time.Second

// acceptedStraight takes the word of session sid's node that it took the
// call of seq sent straight to it (Out.accepted): its lane goes on.
func (c *edgeConn) acceptedStraight(sid string, seq uint64) {
	c.mu.Lock()
	l := c.lanes[sid]
	if l == nil || l.straight == nil || l.straight.call.Seq != seq {
		c.mu.Unlock()
		return
	}
	st := l.straight
	st.timer.Stop()
	l.straight = nil
	if !st.r.done {
		st.r.node = st.to.Address
	}
	c.taken++
	c.goOn(l)
	c.counted(st, nil)
}

// counted has a prompt sent straight to another node counted in the
// member's requests to grains there (/metrics): taken, with the time
// until its node said so, or not (err).
func (c *edgeConn) counted(st *straightCall, err error) {
	if st.to.Address != c.e.m.Address() {
		c.e.m.CrossNodeRequest(time.Since(st.sent), err)
	}
}

// lostStraight sends st, a prompt of lane l sent straight to its session's
// actor and not taken there, again through the cluster, ahead of what
// the lane has waiting; unless its request was answered meanwhile (its
// node was lost: NodeLost), or the connection is closing.
func (c *edgeConn) lostStraight(l *lane, st *straightCall) {
	r := st.r
	c.e.m.Cluster().PidCache.Remove(l.sid, SessionKind)
	c.mu.Lock()
	if l.straight != st {
		c.mu.Unlock()
		return // taken meanwhile
	}
	st.timer.Stop()
	l.straight = nil
	if to := c.sessions[l.sid]; to != nil && to.Equal(st.to) {
		delete(c.sessions, l.sid) // the lane's next calls find the session anew
	}
	if !r.done && !c.closing {
		call := st.call
		if len(call.Proof) == 0 {
			// Sent in this process with no proof, and maybe still read
			// there: what crosses is a copy, proved.
			call = proto.Clone(call).(*grainspb.Call)
			call.Proof = c.k.prove(nil, call)
		}
		l.queue = append([]*grainspb.Call{call}, l.queue...)
		c.again++
	}
	c.goOn(l)
	c.counted(st, errNotTaken)
}

// errNotTaken is the outcome of a prompt sent straight that its node did
// not take.
var errNotTaken = errors.New("a prompt sent straight was not taken")

// straightAnswered takes what comes back to the edge's PID about the
// prompts sent straight: an Accepted (the node did not take it: it is
// leaving, or refused it) or protoactor's dead letter (no such actor
// there). Either is sent again through the cluster, which says what is
// to be said. A dead letter names no call: it is taken as the one prompt
// sent straight when there is one, and otherwise left to straightWait.
// What comes here may come from any member: the worst it does is send a
// call again through the cluster, whose node serves a seq once.
func (c *edgeConn) straightAnswered(m any) {
	c.mu.Lock()
	var found *lane
	n := 0
	for _, l := range c.lanes {
		if l.straight == nil {
			continue
		}
		n++
		switch m := m.(type) {
		case *grainspb.Accepted:
			if l.straight.call.Seq == m.Seq {
				found = l
			}
		case *actor.DeadLetterResponse:
			found = l
		}
	}
	if _, dead := m.(*actor.DeadLetterResponse); found == nil || dead && n > 1 {
		c.mu.Unlock()
		return
	}
	st := found.straight
	c.mu.Unlock()
	c.lostStraight(found, st)
}

// goStraight marks call, a prompt of request r, as sent straight to the
// session's actor to, for the caller to send once c.mu (held) is let go:
// the lane sends nothing behind it until to's node says it took it, and
// sends it again through the cluster if no word comes (lostStraight).
func (c *edgeConn) goStraight(l *lane, call *grainspb.Call, r *request, to *actor.PID) {
	st := &straightCall{call: call, r: r, to: to, sent: time.Now()}
	l.straight = st
	st.timer = time.AfterFunc(straightWait, func() { c.lostStraight(l, st) })
}
