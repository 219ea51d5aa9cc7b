package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// Outbox writes everything sessions say to the client. It is implemented by
// the ACP edge. Calls never block on the transport: they queue, and each
// session's queue is written in order. What a session may have queued is
// bounded by its Budget (streamed output, the only kind a session produces
// faster than its inputs) and by its inputs (every other update answers a
// prompt, a tool call or a request).
type Outbox interface {
	// Update queues a session/update notification.
	Update(sessionID string, u acp.SessionUpdate)
	// Stream queues a notification that carries n bytes taken from the
	// session's budget; the outbox gives them back once it is written.
	Stream(sessionID string, u acp.SessionUpdate, b *Budget, n int)
	// Deliver sends msg to pid once every update queued before it for the
	// session has been written, so a request's reply never overtakes the
	// updates it caused.
	Deliver(sessionID string, pid *actor.PID, msg any)
	// Answer writes the result of a turn started with Session.Start as its
	// prompt's response, behind every update queued before it for the
	// session. It is called once per Reply.
	Answer(sessionID string, r *Reply, res *TurnResult)
}

// Reply is the edge's handle on a prompt whose turn was started with
// Session.Start: the turn's result comes back to it through
// Outbox.Answer, exactly once, whether the turn ends, fails, is cancelled
// or its session stops first. ID is the prompt request's JSON-RPC id; Done,
// when set, receives the result instead of a response being written (a
// caller that answers the request itself).
type Reply struct {
	ID       []byte
	Done     chan *TurnResult
	answered atomic.Bool
}

// answer hands res to the outbox unless r was answered already.
func (rt *Runtime) answer(sessionID string, r *Reply, res *TurnResult) {
	if r.answered.CompareAndSwap(false, true) {
		rt.out.Answer(sessionID, r, res)
	}
}
