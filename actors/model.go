package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/mm-agent/mm/llm"
)

// modelActor runs one model call. Its goroutine streams from the model and
// sends every delta, then the outcome, to the session actor that spawned it.
// Stopping the actor (poison or stop) cancels the stream.
type modelActor struct {
	rt    *Runtime
	model llm.Model
	req   llm.Request
	turn  uint64
	call  int
	// compact makes the call a compression: its outcome is a compactDone
	// and its deltas are not sent.
	compact bool
	cancel  context.CancelFunc
}

func (m *modelActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		var c context.Context
		c, m.cancel = context.WithCancel(context.Background())
		root, parent := ctx.ActorSystem().Root, ctx.Parent()
		m.rt.goWork(func() { m.stream(c, root, parent) })
	case *actor.Stopping:
		if m.cancel != nil {
			m.cancel()
		}
	}
}

// stream runs outside the actor: it may block on the network as long as the
// model takes. It recovers its own panics so a broken provider fails the
// call, not the process.
func (m *modelActor) stream(ctx context.Context, root *actor.RootContext, parent *actor.PID) {
	done := &modelDone{Turn: m.turn, Call: m.call}
	defer func() {
		if r := recover(); r != nil {
			done.Err = fmt.Sprintf("model provider panicked: %v", r)
		}
		if m.compact {
			root.Send(parent, &compactDone{Turn: m.turn, Response: done.Response, Err: done.Err})
			return
		}
		root.Send(parent, done)
	}()
	emit := func(d llm.Delta) {
		root.Send(parent, &modelDelta{Turn: m.turn, Call: m.call, Delta: d})
	}
	if m.compact {
		emit = func(llm.Delta) {}
	}
	resp, err := m.model.Stream(ctx, m.req, emit)
	if err != nil {
		done.Canceled = errors.Is(err, context.Canceled) || ctx.Err() != nil
		done.Err = oneLine(err.Error())
		return
	}
	done.Response = resp
}
