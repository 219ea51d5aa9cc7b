package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
)

// Role is the author of a history message.
type Role string

// The roles a history message may have.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation history. It is plain data: the
// session actor owns a slice of them and hands copies to model calls.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and Name identify the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	Name       string `json:"name,omitempty"`
	// Summary marks a user-role message that holds a /compact summary.
	Summary bool `json:"summary,omitempty"`
	// Images are a user message's pictures, after its text, for a model
	// that takes images (model.vision).
	Images []Image `json:"images,omitempty"`

	// ACP bookkeeping of a tool-role message, kept for replay.
	CallRef  string         `json:"callRef,omitempty"`  // the ACP toolCallId (call_N)
	Title    string         `json:"title,omitempty"`    // the live tool_call title
	Kind     string         `json:"kind,omitempty"`     // the ACP tool kind
	RawInput map[string]any `json:"rawInput,omitempty"` // the decoded arguments
	Failed   bool           `json:"failed,omitempty"`   // the call ended failed
}

// Image is a picture of a user message, as the editor sent it.
type Image struct {
	MIMEType string `json:"mimeType"`
	Data     string `json:"data"` // base64
}

// dataURL is the image as a data: URL, the form OpenAI-compatible servers take.
func (im Image) dataURL() string { return "data:" + im.MIMEType + ";base64," + im.Data }

// bytes is the decoded image, the form langchaingo's Anthropic and Ollama
// clients take (they encode it again); nil if Data is not base64.
func (im Image) bytes() []byte {
	b, err := base64.StdEncoding.DecodeString(im.Data)
	if err != nil {
		return nil
	}
	return b
}

// ToolCall is one complete tool call, assembled from streamed fragments.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON object text, as the model wrote it
}

// ToolDef describes a tool offered to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON schema of the arguments object
}

// Request is one model call.
type Request struct {
	Messages    []Message
	Tools       []ToolDef
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
	ToolCalls    []ToolCall
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
