// Package acptest drives mm the way an editor does, for tests and the
// stress harness: one jsonrpc.Conn over real pipes, to the in-process agent
// or to an `mm -acp` subprocess, or over any stream (Dial), whose methods
// are acp-go-sdk's ClientSideConnection's, with the SDK's types, and a
// Client that records every notification in arrival order and answers
// permission requests.
//
// The kit reads what mm writes as the SDK's client does, and fails where it
// would: a notification or a request the SDK's types refuse fails the
// calls after it (Client.Refused), a line over the SDK's 10 MiB ends the
// connection. Unlike the SDK's client, it hands each notification to the
// Client before it reads on, so that a call returns once its response and
// every update written before it have arrived.
//
// A Client is safe for concurrent use.
package acptest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/coder/acp-go-sdk"
)

// Client records what the agent sends. Its zero value is not usable: use
// NewClient.
type Client struct {
	mu      sync.Mutex
	cond    *sync.Cond
	updates []acp.SessionNotification
	perms   []acp.RequestPermissionRequest
	forms   []acp.UnstableCreateElicitationRequest
	// cancels counts the agent's $/cancel_request notifications: requests
	// of its own it gave up.
	cancels int
	// refused is the first message of mm's the SDK's types refused.
	refused error
	// Permission answers session/request_permission; nil selects "allow".
	Permission func(acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
	// Elicit answers elicitation/create; nil declines.
	Elicit func(acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error)
}

// NewClient returns an empty recording client.
func NewClient() *Client {
	c := &Client{}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// SessionUpdate records a notification.
func (c *Client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.mu.Unlock()
	c.cond.Broadcast()
	return nil
}

// RequestPermission records the request and answers it.
func (c *Client) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.perms = append(c.perms, p)
	answer := c.Permission
	c.mu.Unlock()
	c.cond.Broadcast()
	if answer != nil {
		return answer(p)
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
		Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "allow"},
	}}, nil
}

// UnstableCreateElicitation records a form and answers it.
func (c *Client) UnstableCreateElicitation(_ context.Context, p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	c.mu.Lock()
	c.forms = append(c.forms, p)
	answer := c.Elicit
	c.mu.Unlock()
	c.cond.Broadcast()
	if answer != nil {
		return answer(p)
	}
	return acp.UnstableCreateElicitationResponse{Decline: &acp.UnstableCreateElicitationDecline{Action: "decline"}}, nil
}

// Cancels is how many of its own requests the agent has given up
// ($/cancel_request) so far.
func (c *Client) Cancels() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancels
}

// Forms returns the elicitation/create requests received so far.
func (c *Client) Forms() []acp.UnstableCreateElicitationRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]acp.UnstableCreateElicitationRequest(nil), c.forms...)
}

// Updates returns the notifications of a session, in arrival order.
func (c *Client) Updates(sessionID acp.SessionId) []acp.SessionUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []acp.SessionUpdate
	for _, n := range c.updates {
		if n.SessionId == sessionID {
			out = append(out, n.Update)
		}
	}
	return out
}

// Permissions returns the permission requests received so far.
func (c *Client) Permissions() []acp.RequestPermissionRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]acp.RequestPermissionRequest(nil), c.perms...)
}

// Reset forgets what was recorded.
func (c *Client) Reset() {
	c.mu.Lock()
	c.updates, c.perms, c.forms, c.cancels = nil, nil, nil, 0
	c.mu.Unlock()
}

// wakeWhenDone wakes the client's waiters when ctx ends, so that a wait on
// c.cond sees ctx.Err(); it returns the func that stops it.
func (c *Client) wakeWhenDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
}

// WaitUpdate blocks until some notification of the session satisfies ok, or
// ctx ends.
func (c *Client) WaitUpdate(ctx context.Context, sessionID acp.SessionId, ok func(acp.SessionUpdate) bool) error {
	defer c.wakeWhenDone(ctx)()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for _, n := range c.updates {
			if n.SessionId == sessionID && ok(n.Update) {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for an update of %s: %w", sessionID, ctx.Err())
		}
		c.cond.Wait()
	}
}

// Text concatenates the agent_message_chunk texts among updates.
func Text(updates []acp.SessionUpdate) string {
	s := ""
	for _, u := range updates {
		if u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil {
			s += u.AgentMessageChunk.Content.Text.Text
		}
	}
	return s
}

// Kind names an update by its sessionUpdate discriminator.
func Kind(u acp.SessionUpdate) string {
	b, err := json.Marshal(u)
	if err != nil {
		return "?"
	}
	var v struct {
		K string `json:"sessionUpdate"`
	}
	_ = json.Unmarshal(b, &v)
	return v.K
}
