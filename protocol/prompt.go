package protocol

import (
	"encoding/json"
	"errors"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
)

// A prompt's request at the edge: its params decoded in one pass, and the
// request kept by id for $/cancel_request until it is answered.

// promptRef is a prompt request: its session and number once started, or
// cancelled, when its $/cancel_request came before it started.
type promptRef struct {
	in        *ingress
	session   *actors.Session
	seq       uint64
	reply     *actors.Reply
	cancelled bool
}

// servePrompt starts a prompt's turn in its session's order, and keeps it
// by id for $/cancel_request until it is answered.
func (in *ingress) servePrompt(r *actors.Reply, p acp.PromptRequest) {
	ref := &promptRef{reply: r, in: in}
	in.mu.Lock()
	in.prompts[idKey(r.ID)] = ref
	in.mu.Unlock()
	in.agent.servePrompt(r, p, ref)
}

// started records the session and number of a prompt; it reports whether
// the prompt's $/cancel_request came before it started.
func (ref *promptRef) started(s *actors.Session, seq uint64) (cancelled bool) {
	ref.in.mu.Lock()
	defer ref.in.mu.Unlock()
	ref.session, ref.seq = s, seq
	return ref.cancelled
}

// answered forgets a prompt request once its response is written.
func (in *ingress) answered(r *actors.Reply) {
	if r.Method != acp.AgentMethodSessionPrompt || r.ID == nil {
		return
	}
	key := idKey(r.ID)
	in.mu.Lock()
	if ref, ok := in.prompts[key]; ok && ref.reply == r {
		delete(in.prompts, key)
	}
	in.mu.Unlock()
}

// promptRequest decodes session/prompt params into the SDK's types in one
// pass for text blocks, the blocks editors send most: acp.ContentBlock's
// own decoder reads each block into a map, then again into its variant,
// which cost a tenth of mm's CPU under load (mmstress over pipes); a block
// of any other type takes it.
type promptRequest struct {
	Meta      map[string]any `json:"_meta,omitempty"`
	MessageId *string        `json:"messageId,omitempty"`
	Prompt    []promptBlock  `json:"prompt"`
	SessionId acp.SessionId  `json:"sessionId"`
}

type promptBlock struct{ acp.ContentBlock }

func (b *promptBlock) UnmarshalJSON(data []byte) error {
	var t acp.ContentBlockText
	if json.Unmarshal(data, &t) == nil && t.Type == "text" {
		b.Text = &t
		return nil
	}
	return b.ContentBlock.UnmarshalJSON(data)
}

func (p *promptRequest) request() acp.PromptRequest {
	r := acp.PromptRequest{Meta: p.Meta, MessageId: p.MessageId, SessionId: p.SessionId, Prompt: make([]acp.ContentBlock, len(p.Prompt))}
	for i := range p.Prompt {
		r.Prompt[i] = p.Prompt[i].ContentBlock
	}
	return r
}

// Validate is the SDK's PromptRequest.Validate.
func (p *promptRequest) Validate() error {
	if p.Prompt == nil {
		return errors.New("prompt is required")
	}
	return nil
}
