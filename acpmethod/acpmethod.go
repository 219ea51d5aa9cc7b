// Package acpmethod is the one table of the ACP methods mm speaks, each
// named once with what every part of mm needs to know of it: its params
// type, whether it is scoped to a session, whether it opens one or makes
// one, whether it starts work, whether it is ordered with its session and
// may be forwarded to the node of a cluster that holds the session. The
// agent side serves by it (protocol's handlers are keyed by its names, and
// a test holds the two together), mm serve's transports route by it, mm
// connect follows the sessions its editor opens by it, a cluster's nodes
// place and drain by it: none restates it.
//
// It imports acp-go-sdk only (the params types and the method names).
package acpmethod

import (
	"encoding/json"

	"github.com/coder/acp-go-sdk"
)

// Method is one method's entry.
type Method struct {
	Name string
	// Params makes a new value of its params type (acp-go-sdk's, or mm's
	// own where the SDK has none) to decode into; nil for none.
	Params func() any
	// Notification says the client sends it without an id.
	Notification bool
	// Session says that its params name a session (params.sessionId):
	// streamable HTTP's POST must name it in Acp-Session-Id.
	Session bool
	// Opens says it opens a session the connection then holds (new, load,
	// resume, fork); Creates, that it makes a new session id (new, fork).
	Opens, Creates bool
	// Closes says the connection no longer holds the session once it is
	// answered (close, delete).
	Closes bool
	// Starts says it starts work on its session (a turn, or a change a
	// turn reads): a draining node sends it, and an opening, back.
	Starts bool
	// Ordered says it is served in its session's order (the session's
	// mailbox), behind what was read before it.
	Ordered bool
	// Forward says that in a cluster it goes to the node that holds its
	// session.
	Forward bool
	// ToClient says an agent sends it to its client (mm to the editor, an
	// asked agent to mm); the others a client sends to its agent.
	ToClient bool
}

// Lookup is the entry of the method name; false for one mm does not
// speak.
func Lookup(name string) (Method, bool) {
	m, ok := table[name]
	return m, ok
}

// All is every entry, in no order.
func All() []Method {
	out := make([]Method, 0, len(table))
	for _, m := range table {
		out = append(out, m)
	}
	return out
}

// Is says whether name is a method with the property p.
func Is(name string, p func(Method) bool) bool {
	m, ok := table[name]
	return ok && p(m)
}

// SetModel is the legacy session/set_model (ACP before config options),
// which JetBrains AIR still sends: {sessionId, modelId} sets the session's
// model config option. acp-go-sdk v0.13.5 has no type for it.
const SetModel = "session/set_model"

// SetModelRequest is session/set_model's params.
type SetModelRequest struct {
	SessionId acp.SessionId  `json:"sessionId"`
	ModelId   string         `json:"modelId"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

// Validate checks what the schema requires.
func (r *SetModelRequest) Validate() error {
	switch {
	case r.SessionId == "":
		return errRequired("sessionId")
	case r.ModelId == "":
		return errRequired("modelId")
	}
	return nil
}

type errRequired string

func (e errRequired) Error() string { return string(e) + " is required" }

// CancelRequest is the $/cancel_request notification (JSON-RPC's
// cancellation, which ACP adopted): it cancels the request of the id.
const CancelRequest = "$/cancel_request"

// CancelRequestParams is $/cancel_request's params.
type CancelRequestParams struct {
	RequestID json.RawMessage `json:"requestId"`
}

func params[P any]() func() any { return func() any { return new(P) } }

// table is every method mm speaks as an agent, and those it takes as a
// client of another agent.
var table = map[string]Method{
	acp.AgentMethodInitialize:   {Params: params[acp.InitializeRequest]()},
	acp.AgentMethodAuthenticate: {Params: params[acp.AuthenticateRequest]()},
	acp.AgentMethodLogout:       {Params: params[acp.LogoutRequest]()},
	acp.AgentMethodSessionList:  {Params: params[acp.ListSessionsRequest]()},

	acp.AgentMethodSessionNew:  {Params: params[acp.NewSessionRequest](), Opens: true, Creates: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionFork: {Params: params[acp.UnstableForkSessionRequest](), Session: true, Opens: true, Creates: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionLoad: {Params: params[acp.LoadSessionRequest](), Session: true, Opens: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionResume: {Params: params[acp.ResumeSessionRequest](), Session: true, Opens: true, Ordered: true,
		Forward: true},
	acp.AgentMethodSessionPrompt:          {Params: params[acp.PromptRequest](), Session: true, Starts: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionSetMode:         {Params: params[acp.SetSessionModeRequest](), Session: true, Starts: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionSetConfigOption: {Params: params[acp.SetSessionConfigOptionRequest](), Session: true, Starts: true, Ordered: true, Forward: true},
	SetModel:                              {Params: params[SetModelRequest](), Session: true, Starts: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionClose:           {Params: params[acp.CloseSessionRequest](), Session: true, Closes: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionDelete:          {Params: params[acp.UnstableDeleteSessionRequest](), Session: true, Closes: true, Ordered: true, Forward: true},
	acp.AgentMethodSessionCancel:          {Params: params[acp.CancelNotification](), Notification: true, Session: true, Ordered: true, Forward: true},
	CancelRequest:                         {Params: params[CancelRequestParams](), Notification: true, Forward: true},

	// What mm takes as a client (an asked agent's, or mm's own seen from
	// the stress harness and mm connect).
	acp.ClientMethodSessionUpdate:            {Params: params[acp.SessionNotification](), Notification: true, Session: true, ToClient: true},
	acp.ClientMethodSessionRequestPermission: {Params: params[acp.RequestPermissionRequest](), Session: true, ToClient: true},
	acp.ClientMethodElicitationCreate:        {Params: params[acp.UnstableCreateElicitationRequest](), ToClient: true},
}

func init() {
	for name, m := range table {
		m.Name = name
		table[name] = m
	}
}
