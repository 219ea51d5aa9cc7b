package actors

import (
	"github.com/mm-agent/mm/jsonrpc"

	"context"
	"encoding/json"
	"errors"

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
	// *TurnResult for a prompt, an *Outcome for any other request. A
	// session answers through the outbox it is attached to, and an outbox
	// answers each request of its connection once: the answer to one it
	// does not hold (answered already, or another connection's: the
	// session moved after it was sent, its connection gone) is dropped.
	Answer(sessionID string, r Reply, res any)
	// UpdateRaw queues a session/update whose update member is raw JSON:
	// what the SDK's types do not hold yet (a notice, a compaction), for a
	// client that announced it (Caps).
	UpdateRaw(sessionID string, update json.RawMessage)
}

// Notice is a warning that is not the model's words: an MCP server left
// out, a session file not trusted, commands that run unconfined.
type Notice struct {
	// Severity is info, warning or error.
	Severity    string
	Title       string
	Description string
}

// NoticeUpdate is n as the update member of a session/update.
func NoticeUpdate(n Notice) json.RawMessage {
	m := map[string]any{"sessionUpdate": "notice", "severity": n.Severity, "title": n.Title}
	if n.Description != "" {
		m["description"] = n.Description
	}
	b, _ := json.Marshal(m)
	return b
}

// Reply names a request a session answers: a prompt started with
// Session.Start, or a mode, a model, a replay or a resume. It is plain
// data: ID is the request's JSON-RPC id as the client wrote it, Method its
// method (how the edge encodes the answer), Seq the process's number for
// the request (NewReply), by which the connection's outbox takes its
// answer once. The answer comes through Outbox.Answer whether the request
// succeeds, fails, is cancelled or its session stops first.
type Reply struct {
	ID     jsonrpc.ID
	Method string
	Seq    uint64
}

// NewReply names a request: its number is the process's next
// (jsonrpc.NextSeq, the numbering of every connection's requests).
func NewReply(id jsonrpc.ID, method string) Reply {
	return Reply{ID: id, Method: method, Seq: jsonrpc.NextSeq()}
}

// discard is the Outbox of a session no connection holds: updates and
// answers are dropped (the budget given back), messages delivered at once.
type discard struct{ root *actor.RootContext }

func (discard) Update(string, acp.SessionUpdate) {}

func (discard) Stream(_ string, _ acp.SessionUpdate, b *Budget, n int) { b.Give(n) }

func (d discard) Deliver(_ string, pid *actor.PID, msg any) { d.root.Send(pid, msg) }

func (discard) Answer(string, Reply, any) {}

func (discard) UpdateRaw(string, json.RawMessage) {}

// nobody is the Client of a session no connection holds: no one can be
// asked.
type nobody struct{}

var errNobody = errors.New("no editor is connected to this session")

func (nobody) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{}, errNobody
}

func (nobody) Forms(string) bool { return false }

func (nobody) Caps(string) Caps { return 0 }

func (nobody) Elicit(context.Context, Elicitation) (ElicitationResult, error) {
	return ElicitationResult{}, errNobody
}

func (nobody) ElicitURL(context.Context, URLElicitation) (string, error) { return "", errNobody }

// CompactionUpdate is a compaction_update (ACP's unstable session/update)
// of compaction id: its status (in_progress, completed, failed), and its
// summary or error when set.
func CompactionUpdate(id, status, summary, err string) json.RawMessage {
	m := map[string]any{"sessionUpdate": "compaction_update", "compactionId": id, "status": status}
	if summary != "" {
		m["summary"] = []map[string]string{{"type": "text", "text": summary}}
	}
	if err != "" {
		m["error"] = err
	}
	b, _ := json.Marshal(m)
	return b
}
