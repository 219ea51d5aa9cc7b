package actors

import (
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
}
