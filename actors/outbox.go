package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// Outbox writes everything sessions say to the client. It is implemented by
// the ACP edge. Calls never block on the transport: they queue, and each
// session's queue is written in order.
type Outbox interface {
	// Update queues a session/update notification.
	Update(sessionID string, u acp.SessionUpdate)
	// Deliver sends msg to pid once every update queued before it for the
	// session has been written, so a prompt's reply never overtakes its
	// own updates.
	Deliver(sessionID string, pid *actor.PID, msg any)
	// Answer writes the result of a turn started with Session.Start as its
	// prompt's response, behind every update queued before it for the
	// session. It is called once per Reply.
	Answer(sessionID string, r *Reply, res *TurnResult)
}

// Reply is the edge's handle on a prompt whose turn was started with
// Session.Start: the turn's result comes back to it through
// Outbox.Answer, exactly once, whether the turn ends, fails, is cancelled
// or its session stops first. ID is the edge's (the JSON-RPC request id).
type Reply struct {
	ID       []byte
	answered atomic.Bool
}

// answer hands res to the outbox unless r was answered already.
func (rt *Runtime) answer(sessionID string, r *Reply, res *TurnResult) {
	if r.answered.CompareAndSwap(false, true) {
		rt.out.Answer(sessionID, r, res)
	}
}
