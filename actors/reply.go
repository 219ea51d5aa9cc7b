package actors

import "github.com/asynkron/protoactor-go/actor"

// A call is a request of the edge's that the session answers to the edge
// itself, not through an Outbox (Flush, State, Attach, Settle, a delete's
// Forget). Its message names where the answer goes: the PID (plain data)
// of a reply process registered in the actor system's process registry,
// as protoactor's futures are; whoever answers (the session, or its
// writer once the file is on disk) sends the answer there, and the first
// one is taken. No table of mm's keeps the calls.

// reply is a call's answer's destination: a process that takes the first
// message sent to it, and leaves the registry then (a call no one waits
// for any more leaves nothing behind once answered).
type reply struct {
	ch  chan any
	reg *actor.ProcessRegistryValue
}

func (r *reply) SendUserMessage(pid *actor.PID, msg any) {
	select {
	case r.ch <- actor.UnwrapEnvelopeMessage(msg):
		r.reg.Remove(pid)
	default: // answered already
	}
}

func (r *reply) SendSystemMessage(*actor.PID, any) {}

func (r *reply) Stop(*actor.PID) {}

// newReply registers a reply process and returns its PID.
func (rt *Runtime) newReply() (*actor.PID, *reply) {
	reg := rt.sys.ProcessRegistry
	r := &reply{ch: make(chan any, 1), reg: reg}
	pid, _ := reg.Add(r, "reply"+reg.NextId())
	return pid, r
}
