package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/agents"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/jsonrpc"
)

// askAgent asks one of the session's agents (ask_agent): its permission
// requests and forms are relayed to this session's client, and the postAsk
// hooks may replace its answer.
func (w *toolWorker) askAgent(ctx context.Context, root *actor.RootContext, parent *actor.PID, agent, question string) (string, error) {
	if w.agents == nil {
		return "", errors.New("no agents are configured (config agents)")
	}
	answer, err := w.agents.Ask(ctx, agent, question, &relay{w: w, root: root, parent: parent, agent: agent})
	if err != nil {
		return answer, err
	}
	return w.rt.hooks.PostAsk(ctx, hooks.PostAskEvent{
		SessionID: w.session, Cwd: w.env.Cwd, Agent: agent, Question: question, Answer: answer, Confine: w.hookConfine,
	}), nil
}

// relay puts an asked agent's questions to this session's user, as asked
// by this ask_agent call: a person answers them, so the turn's slot is
// given back meanwhile, one question at a time.
type relay struct {
	w      *toolWorker
	root   *actor.RootContext
	parent *actor.PID
	agent  string
	mu     sync.Mutex
}

var _ agents.Relay = (*relay)(nil)

func (r *relay) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tc := p.ToolCall
	tc.ToolCallId = acp.ToolCallId(r.w.callID)
	title := r.agent
	if tc.Title != nil {
		title += ": " + *tc.Title
	}
	tc.Title = &title
	var resp acp.RequestPermissionResponse
	var err error
	if !r.w.person(ctx, r.root, r.parent, func() {
		resp, err = r.w.client.RequestPermission(ctx, acp.RequestPermissionRequest{SessionId: acp.SessionId(r.w.session), ToolCall: tc, Options: p.Options})
	}) {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return resp, err
}

// Elicit relays a form: the asked agent's message and schema, asked for
// this session's ask_agent call (its own scope, in
// _meta["mm.elicitationScope"], names the asked agent's session).
func (r *relay) Elicit(ctx context.Context, p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Form == nil {
		return acp.UnstableCreateElicitationResponse{}, acp.NewInvalidParams(map[string]any{"error": "only form elicitations are relayed"})
	}
	if !r.w.client.Forms(r.w.session) {
		return acp.UnstableCreateElicitationResponse{}, jsonrpc.Internal("no one can be asked: the editor cannot show forms", nil)
	}
	var schema map[string]any
	b, err := json.Marshal(p.Form.RequestedSchema)
	if err == nil {
		err = json.Unmarshal(b, &schema)
	}
	if err != nil {
		return acp.UnstableCreateElicitationResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	var res ElicitationResult
	if !r.w.person(ctx, r.root, r.parent, func() {
		res, err = r.w.client.Elicit(ctx, Elicitation{SessionID: r.w.session, ToolCallID: r.w.callID, Message: p.Form.Message, Schema: schema})
	}) {
		return acp.UnstableCreateElicitationResponse{Cancel: &acp.UnstableCreateElicitationCancel{Action: "cancel"}}, nil
	}
	switch {
	case err != nil:
		return acp.UnstableCreateElicitationResponse{}, jsonrpc.Internal(err.Error(), nil)
	case res.Action == "accept":
		return acp.UnstableCreateElicitationResponse{Accept: &acp.UnstableCreateElicitationAccept{Action: "accept", Content: res.Content}}, nil
	case res.Action == "decline":
		return acp.UnstableCreateElicitationResponse{Decline: &acp.UnstableCreateElicitationDecline{Action: "decline"}}, nil
	}
	return acp.UnstableCreateElicitationResponse{Cancel: &acp.UnstableCreateElicitationCancel{Action: "cancel"}}, nil
}
