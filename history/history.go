package history

import (
	"strings"
	"unicode/utf8"
)

// Role is the author of a message.
type Role string

// The roles a message may have.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation. It is plain data: the session
// actor owns a slice of them, the session file stores them as they are
// (docs/session-format.md), a load replays them, and a model call reads a
// window of them (Fit).
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

	// ACP bookkeeping of a tool-role message, kept for replay; a model
	// call never reads it.
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

// ToolCall is one complete tool call an assistant message asked for, as
// the model wrote it.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON object text, as the model wrote it
}

// PlanEntry is one step of a session's plan, as ACP's plan update shows it.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

// TitleMax is the longest title, in characters (runes), that Title returns.
const TitleMax = 120

// Title returns the title of a history: the first line of the first user
// message that is not a /compact summary and has some text, trimmed of
// spaces and cut to TitleMax characters (the last one an ellipsis when cut).
// It returns "" when there is no such message.
func Title(h []Message) string {
	for i := range h {
		m := &h[i]
		if m.Role != RoleUser || m.Summary {
			continue
		}
		s := strings.TrimSpace(m.Content)
		if s == "" {
			// A prompt made only of an image has no text to show; the
			// next user message makes a better title than nothing.
			continue
		}
		if i := strings.IndexAny(s, "\r\n"); i >= 0 {
			s = strings.TrimSpace(s[:i])
		}
		return cutRunes(s, TitleMax)
	}
	return ""
}

// cutRunes cuts s to at most n runes, ending a cut string with "…" so that
// the reader sees the title goes on.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return strings.TrimRight(s[:i], " \t") + "…"
}

// AnswerTo finds the tool message that answers call id among the messages
// after the call's, nil when the call was never answered.
func AnswerTo(after []Message, id string) *Message {
	for i := range after {
		m := &after[i]
		if m.Role == RoleTool && m.ToolCallID == id {
			return m
		}
		if m.Role == RoleUser {
			break // a new prompt: the call was never answered
		}
	}
	return nil
}
