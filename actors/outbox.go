package actors

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
)

// Outbox writes everything sessions say to the client. It is implemented by
// the ACP edge. Calls never block on the transport: they queue, and each
// session's queue is written in order. What a session may have queued is
// bounded by its Budget (streamed output, the only kind a session produces
// faster than its inputs) and by its inputs (every other update answers a
// prompt, a tool call or a request, and the edge bounds the requests it
// has read and not yet answered).
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
	// Answer writes res as the response to the request r stands for,
	// behind every update queued before it for the session. res is a
	// *TurnResult for a prompt, an *Outcome for any other request. It is
	// called once per Reply.
	Answer(sessionID string, r *Reply, res any)
}

// Reply is the edge's handle on a request a session answers: a prompt
// started with Session.Start, or a mode, a model, a replay or a resume. The
// answer comes back to it through Outbox.Answer, exactly once, whether the
// request succeeds, fails, is cancelled or its session stops first. ID is
// the request's JSON-RPC id and Method its method, which is how the edge
// encodes the answer; Done, when set, receives the answer instead of a
// response being written (a caller that answers the request itself).
type Reply struct {
	ID     []byte
	Method string
	// Out is the writer of the connection the request came on: its answer
	// goes there, wherever the session is attached by then. nil: the
	// runtime's default Outbox.
	Out      Outbox
	Done     chan any
	answered atomic.Bool
}

// Claim marks r answered and reports whether it was not already: whoever
// claims a reply answers it, once.
func (r *Reply) Claim() bool { return r != nil && r.answered.CompareAndSwap(false, true) }

// answer hands res to the request's outbox unless r was answered already.
func (rt *Runtime) answer(sessionID string, r *Reply, res any) {
	if r.Claim() {
		out := r.Out
		if out == nil {
			out = rt.out
		}
		out.Answer(sessionID, r, res)
	}
}

// discard is the Outbox of a session no connection holds: updates are
// dropped (their budget given back), messages delivered at once, answers
// dropped unless their caller waits on Done.
type discard struct{ root *actor.RootContext }

func (discard) Update(string, acp.SessionUpdate) {}

func (discard) Stream(_ string, _ acp.SessionUpdate, b *Budget, n int) { b.Give(n) }

func (d discard) Deliver(_ string, pid *actor.PID, msg any) { d.root.Send(pid, msg) }

func (discard) Answer(_ string, r *Reply, res any) {
	if r.Done != nil {
		r.Done <- res
	}
}

// nobody is the Client of a session no connection holds: no one can be
// asked.
type nobody struct{}

var errNobody = errors.New("no editor is connected to this session")

func (nobody) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{}, errNobody
}

func (nobody) Forms(string) bool { return false }

func (nobody) Elicit(context.Context, Elicitation) (ElicitationResult, error) {
	return ElicitationResult{}, errNobody
}
