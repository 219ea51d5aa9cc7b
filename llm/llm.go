package llm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mm-agent/mm/history"
)

// ToolDef describes a tool offered to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON schema of the arguments object
}

// Request is one model call.
type Request struct {
	Messages []history.Message
	Tools    []ToolDef
	// ToolsOff asks for an answer without tool calls (a turn's last call):
	// the tools are not offered. Anthropic's API refuses a history of
	// tool calls without their definitions, so there they are still sent,
	// and the request's own words must say that none may be called.
	ToolsOff    bool
	MaxTokens   int     // 0 = provider default
	Temperature float64 // < 0 = provider default
}

// Usage is what the server reported for one call. Zero fields were not reported.
type Usage struct {
	InputTokens      int `json:"inputTokens"`
	OutputTokens     int `json:"outputTokens"`
	ThoughtTokens    int `json:"thoughtTokens,omitempty"`
	CachedReadTokens int `json:"cachedReadTokens,omitempty"`
}

// Finish reasons normalised across providers.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
)

// DeltaKind says what a streamed delta carries.
type DeltaKind uint8

// The kinds of streamed deltas.
const (
	DeltaText      DeltaKind = iota // visible answer text
	DeltaReasoning                  // reasoning / thinking text
	// DeltaNotice is a line for the user about the call itself ("model
	// server busy, retrying in 4 s"): neither answer nor reasoning, never
	// part of the Response.
	DeltaNotice
)

// Delta is one streamed fragment. Tool-call fragments are never deltas: they
// are assembled by the provider and returned whole in Response.ToolCalls.
type Delta struct {
	Kind DeltaKind
	Text string
}

// Response is the outcome of one model call.
type Response struct {
	Text         string
	Reasoning    string
	ToolCalls    []history.ToolCall
	Usage        *Usage // nil when the server reported nothing
	FinishReason string // FinishStop, FinishLength or FinishToolCalls
}

// Model streams completions. Stream calls emit for every delta, in order, from
// the calling goroutine, and returns when the call is complete. emit may
// block, to pace a consumer that reads slowly: the stream waits, and that
// wait is not the server's silence (Config.IdleTimeout). It must return
// promptly with ctx.Err() (possibly wrapped) once ctx is cancelled. Errors are
// one line, fit to show a user (ErrServer wraps server-side failures).
type Model interface {
	Stream(ctx context.Context, req Request, emit func(Delta)) (Response, error)
}

// ErrServer marks failures of the model server: connection refused, an HTTP
// error status, a malformed stream, a timeout.
var ErrServer = errors.New("model server")
