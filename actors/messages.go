package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/prompt"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools/skills"
)

// StartTurn asks a session actor to run one prompt. Seq is the prompt's
// number in its session (1, 2, …, in the order Session.Start was called); a
// cancel carries the highest Seq it covers. The result goes to Reply,
// through the outbox, once every update of the turn is written.
type StartTurn struct {
	Seq    uint64
	Prompt []acp.ContentBlock
	Reply  Reply
	// Asked is the instructions watch's ticket when the prompt reached
	// mm (prompt.Watch.Ticket): a read of the kernel's queue begun since
	// answers whether its instructions changed before it.
	Asked uint64
}

// TurnResult ends a turn. Err, when set, is a one-line explanation and the
// turn failed; otherwise StopReason says why it ended.
type TurnResult struct {
	StopReason acp.StopReason
	Usage      *acp.Usage
	Err        string
	// Refused says why the prompt was not taken (too many of its
	// session's wait): the client's request was invalid, not mm.
	Refused string
	// Provenance is set after /new and /compact, which change it.
	Provenance store.Provenance
}

// Replay asks a session to send its history as replay notifications, then
// available_commands_update; the answer, an *Outcome, follows them.
type Replay struct{ Reply Reply }

// Resume asks a session for an *Outcome describing it, then to announce its
// commands: a session taken up again without a replay.
type Resume struct{ Reply Reply }

// Attach moves a session to another connection: from the message on,
// everything it says goes to that connection's outbox, and its tools ask
// its client. Connection 0, or one closed by the time the session takes
// the message, detaches it (no connection holds it: its output is
// dropped, no one can be asked). The reply is a *Done.
type Attach struct {
	// Conn is the connection, in the runtime's table (Runtime.Connect); 0
	// detaches the session.
	Conn ConnID
	// settle, when set, moves the session only once it has no turn: the
	// messages sent after the Attach wait in the session until then
	// (Session.Move).
	settle bool
	// ReplyTo, when set, is told once the session has moved (Session.Attach).
	ReplyTo *actor.PID
}

// endSession stops a session once the messages sent before it are served
// (Session.End). protoactor's PoisonPill is served before Receive sees it,
// so it would overtake what an opening or a moving session keeps.
type endSession struct{}

// unstash hands a moved session the messages it kept while it waited for
// its turns to end.
type unstash struct{}

// settle asks a session to answer, with a *Done, once it has no turn.
type settle struct{ ReplyTo *actor.PID }

// GetState asks a session for a copy of its state; the reply is a
// *SessionState.
type GetState struct{ ReplyTo *actor.PID }

// SetMode switches a session between "ask" and "yolo"; the answer is an
// *Outcome.
type SetMode struct {
	Mode  string
	Reply Reply
}

// SetModel selects one of the runtime's models by id; the answer is an
// *Outcome.
type SetModel struct {
	ID    string
	Reply Reply
}

// SetSandbox sets the session's sandbox mode (package sandbox), one no
// wider than the runtime's; the answer is an *Outcome.
type SetSandbox struct {
	Mode  string
	Reply Reply
}

// SetNetwork turns the session's network on or off for its confined
// commands: off always, on only when the runtime's is (sandbox.network);
// the answer is an *Outcome.
type SetNetwork struct {
	On    bool
	Reply Reply
}

// Outcome answers a session request other than a prompt: the session as
// the request left it, or, with Err, why the request was refused (a
// one-line reason about what the client asked).
type Outcome struct {
	Err   string
	Mode  string
	Model string
	// Sandbox is the session's sandbox mode, "" when commands are not
	// confined; Network whether its confined commands reach the network.
	Sandbox    string
	Network    bool
	Provenance store.Provenance
	// Messages counts the messages a replay sent.
	Messages int
}

// Done answers a request that only succeeds or fails.
type Done struct{ Err string }

// Flush asks a session to write its file now; the reply, a *Done, comes
// once it is on disk (or at once without persistence).
type Flush struct{ ReplyTo *actor.PID }

// fileFinal tells a session that ends itself that its file is final
// (written and closed, or removed): it stops.
type fileFinal struct{}

// persisted tells a session its file was written, or why it was not.
type persisted struct{ Err string }

// holds answers a session's check of its store (store.Writer.Check)
// before Turn, or before a replay (Replay set): whether the session's
// copy is still the stored one, and when it is not why, as text.
type holds struct {
	Turn    uint64
	Replay  *Replay
	Holding holding
	Err     string
}

// holding is what a store's check found.
type holding int8

const (
	held        holding = iota // the copy is the stored one (or its writer is closing)
	fencedOff                  // another activation saved the session since (store.ErrFenced)
	unreachable                // the store could not be asked
)

// reloaded brings a session what its store holds, read again because
// another activation saved it meanwhile (holds): the turn or the replay
// waiting for it then goes on from there.
type reloaded struct {
	Turn   uint64
	Replay *Replay
	File   *store.File
	Where  string
	Err    string // why it could not be read; File is nil then
}

// fenced tells a session that its writer's save was refused because
// another activation of the session saved it meanwhile (store.ErrFenced):
// this copy is stale and stops. It reaches the session before the
// persisted of that save.
type fenced struct{ Err string }

// CancelTurns cancels every turn of the session whose Seq is at most UpTo,
// running or queued; with Only set, the turn UpTo alone (a cancelled
// prompt request). It is a high-priority message: it overtakes the stream
// events waiting in the session's mailbox, and so may reach the session
// before the StartTurn of the turn it cancels.
type CancelTurns struct {
	UpTo uint64
	Only bool
}

// GetPriority puts cancels ahead of every other user message.
func (*CancelTurns) GetPriority() int8 { return 7 }

// CancelRequest cancels the prompt of request ID alone (its
// $/cancel_request): the turn answering it, queued or running. It is a
// high-priority message, like CancelTurns: one that reaches the session
// before the prompt's StartTurn cancels that prompt when it arrives. The
// session's turns are its table of the prompts in flight: no one else
// keeps one to find a prompt by its request.
type CancelRequest struct{ ID jsonrpc.ID }

// GetPriority puts cancels ahead of every other user message.
func (*CancelRequest) GetPriority() int8 { return 7 }

// Announce tells a session actor that the response carrying its id is on
// its way to the client, ahead of anything the session queues from now on:
// available_commands_update can follow.
type Announce struct{}

// acquireSlot asks the turn serializer for a turn slot; the answer is a
// slotGranted sent to Session when the slot is free.
type acquireSlot struct {
	Turn    uint64
	Session *actor.PID
	// Owner is the session's owner (its token; "" for mm -acp's): slots
	// go round the owners (turns.go).
	Owner string
}

// releaseSlot frees the slot of a turn, or removes it from the queue. It is
// idempotent: releasing an unknown turn does nothing.
type releaseSlot struct {
	Turn uint64
}

type slotGranted struct {
	Turn uint64
}

// checkWaits makes the serializer look for turns that wait too long.
type checkWaits struct{}

// slotQueue says how many turns run or wait ahead of a waiting one.
type slotQueue struct {
	Turn  uint64
	Ahead int
}

// modelDelta is one streamed fragment of model call Call of turn Turn; it
// carries Cost bytes taken from the session's budget.
type modelDelta struct {
	Turn  uint64
	Call  int
	Delta llm.Delta
	Cost  int
}

// promptReady brings a turn's user message back from the work goroutine
// that looked its @mentions up.
type promptReady struct {
	Turn uint64
	Text string
	// Skills is the catalog as the lookup found it, nil when not read.
	Skills *skills.Set
	// MentionsLeft is how many @mentions past history.MaxMentions were not
	// looked up.
	MentionsLeft int
	// Looked says the instructions were looked for again (the session's
	// were not fresh): Instructions are the project's instruction files
	// as the lookup found them (system.go), Empty the folders it found
	// none in, Watched whether the runtime's Watch holds their folders,
	// Bytes the budget they were read with.
	Looked       bool
	Instructions []prompt.File
	Empty        []prompt.Empty
	Watched      bool
	Bytes        int
}

// modelDone ends model call Call of turn Turn. Err is "" on success.
type modelDone struct {
	Turn     uint64
	Call     int
	Response llm.Response
	Err      string
	Canceled bool
}
