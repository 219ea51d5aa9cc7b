package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/llm"
)

// modelActor runs a session's model calls, one at a time: for each
// runModel, a goroutine streams from the model and sends every delta, then
// the outcome, to the session actor that spawned it. Stopping the actor
// (poison or stop: a cancel) cancels the stream in flight; the session then
// spawns a new one for its next call. Between cancels the actor is kept,
// since spawning one per call was 13% of mm's CPU under load.
type modelActor struct {
	rt     *Runtime
	budget *Budget // the session's
	cancel context.CancelFunc
}

// runModel asks the model actor for one call.
type runModel struct {
	Turn  uint64
	Call  int
	Model string // the runtime's model id
	Req   llm.Request
	// Compact makes the call a compression: its outcome is a compactDone
	// and its deltas are not sent.
	Compact bool
}

func (m *modelActor) Receive(ctx actor.Context) {
	switch r := ctx.Message().(type) {
	case *runModel:
		if m.cancel != nil {
			m.cancel() // the previous call is over; release its context
		}
		var c context.Context
		c, m.cancel = context.WithCancel(context.Background())
		root, parent, model, budget := ctx.ActorSystem().Root, ctx.Parent(), m.rt.models[r.Model], m.budget
		m.rt.goWork(func() { stream(c, model, budget, r, root, parent) })
	case *actor.Stopping:
		if m.cancel != nil {
			m.cancel()
		}
	}
}

// stream runs outside the actor: it may block on the network as long as the
// model takes, and it waits for the session's budget before each delta, so
// a client that reads slowly pauses the stream (inside emit, where llm does
// not count the wait as the model's silence: model.idleTimeout). It
// recovers its own panics so a broken provider fails the call, not the
// process.
func stream(ctx context.Context, model llm.Model, budget *Budget, r *runModel, root *actor.RootContext, parent *actor.PID) {
	done := &modelDone{Turn: r.Turn, Call: r.Call}
	defer func() {
		if p := recover(); p != nil {
			done.Err = fmt.Sprintf("model provider panicked: %v", p)
		}
		if r.Compact {
			root.Send(parent, &compactDone{Turn: r.Turn, Response: done.Response, Err: done.Err})
			return
		}
		root.Send(parent, done)
	}()
	emit := func(d llm.Delta) {
		n := cost(d.Text)
		if budget.take(ctx, n) != nil {
			return // cancelled: the stream ends on its own
		}
		root.Send(parent, &modelDelta{Turn: r.Turn, Call: r.Call, Delta: d, Cost: n})
	}
	if r.Compact {
		emit = func(llm.Delta) {}
	}
	resp, err := model.Stream(ctx, r.Req, emit)
	if err != nil {
		done.Canceled = errors.Is(err, context.Canceled) || ctx.Err() != nil
		done.Err = oneLine(err.Error())
		return
	}
	done.Response = resp
}
