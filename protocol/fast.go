package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/jsonrpc"
)

// What every turn writes — a text chunk, a usage_update, the prompt's
// answer — is appended here byte by byte, as encoding/json writes the
// shapes notification gives: reflection on them was a tenth of mm's CPU
// over pipes under load. TestFastIsMarshal holds each to the SDK's bytes
// for the same values, over many random ones; anything else is encoded
// as before.

// notification is the params of a session/update. The SDK's types encode
// every update by marshalling it, decoding that into a map and marshalling
// the map, its content block the same way: two thirds of mm's CPU went
// there under load (mmstress over pipes). The kinds every turn sends — a
// plain text chunk, a usage_update — are these structs, written byte by
// byte as the SDK writes them (fast.go; TestFastIsMarshal and
// TestOutboxWritesWhatTheSDKWrites hold them to it); any other goes
// through the SDK's types.
func notification(sessionID string, u *acp.SessionUpdate) any {
	if update, ok := hotUpdate(u); ok {
		return sessionNotification{SessionID: sessionID, Update: update}
	}
	return acp.SessionNotification{SessionId: acp.SessionId(sessionID), Update: *u}
}

// hotUpdate is u as one of the hot updates' shapes (textChunk,
// usageUpdate); false when it is of no such shape.
func hotUpdate(u *acp.SessionUpdate) (any, bool) {
	switch {
	case u.AgentMessageChunk != nil && plainChunk(u.AgentMessageChunk.Meta, u.AgentMessageChunk.Content):
		return textChunk{Content: textBlock{Text: u.AgentMessageChunk.Content.Text.Text, Type: "text"}, MessageID: u.AgentMessageChunk.MessageId, SessionUpdate: "agent_message_chunk"}, true
	case u.AgentThoughtChunk != nil && plainChunk(u.AgentThoughtChunk.Meta, u.AgentThoughtChunk.Content):
		return textChunk{Content: textBlock{Text: u.AgentThoughtChunk.Content.Text.Text, Type: "text"}, MessageID: u.AgentThoughtChunk.MessageId, SessionUpdate: "agent_thought_chunk"}, true
	case u.UsageUpdate != nil && u.UsageUpdate.Meta == nil && u.UsageUpdate.Cost == nil:
		return usageUpdate{SessionUpdate: "usage_update", Size: u.UsageUpdate.Size, Used: u.UsageUpdate.Used}, true
	}
	return nil, false
}

// The shapes of the hot updates, fields in the order the SDK writes them
// (its maps' sorted keys).
type (
	sessionNotification struct {
		SessionID string `json:"sessionId"`
		Update    any    `json:"update"`
	}
	textChunk struct {
		Content       textBlock `json:"content"`
		MessageID     *string   `json:"messageId,omitempty"`
		SessionUpdate string    `json:"sessionUpdate"`
	}
	textBlock struct {
		Text string `json:"text"`
		Type string `json:"type"`
	}
	usageUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		Size          int    `json:"size"`
		Used          int    `json:"used"`
	}
)

// appendJSON appends n as encoding/json writes it; false for an update
// of a shape not written here.
func (n sessionNotification) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"sessionId":`...)
	b = jsonrpc.AppendString(b, n.SessionID)
	b = append(b, `,"update":`...)
	b, ok := appendUpdate(b, n.Update)
	return append(b, '}'), ok
}

// appendUpdate appends an update of notification's shapes as the SDK
// writes its acp.SessionUpdate; false for another.
func appendUpdate(b []byte, update any) ([]byte, bool) {
	switch u := update.(type) {
	case textChunk:
		b = append(b, `{"content":{"text":`...)
		b = appendRoundTripped(b, u.Content.Text)
		b = append(b, `,"type":`...)
		b = jsonrpc.AppendString(b, u.Content.Type)
		b = append(b, '}')
		if u.MessageID != nil {
			b = append(b, `,"messageId":`...)
			b = appendRoundTripped(b, *u.MessageID)
		}
		b = append(b, `,"sessionUpdate":`...)
		b = jsonrpc.AppendString(b, u.SessionUpdate)
	case usageUpdate:
		b = append(b, `{"sessionUpdate":`...)
		b = jsonrpc.AppendString(b, u.SessionUpdate)
		b = append(b, `,"size":`...)
		b = appendRoundTrippedInt(b, u.Size)
		b = append(b, `,"used":`...)
		b = appendRoundTrippedInt(b, u.Used)
	default:
		return b, false
	}
	return append(b, '}'), true
}

// MarshalUpdate is json.Marshal(u), the SDK's bytes, appended here when u
// is one of the updates every turn sends: what a node sends across for a
// session's update.
func MarshalUpdate(u *acp.SessionUpdate) ([]byte, error) {
	if update, ok := hotUpdate(u); ok {
		if b, ok := appendUpdate(nil, update); ok {
			return b, nil
		}
	}
	return json.Marshal(u)
}

// MarshalAnswer is json.Marshal(result), appended here when result is a
// prompt's answer that appendResult writes: what a node sends across for
// a session's answer.
func MarshalAnswer(result any) ([]byte, error) {
	if b, ok := appendResult(nil, result, nil); ok {
		return b, nil
	}
	return json.Marshal(result)
}

// appendRoundTripped appends s as the SDK writes a string of an update,
// which it encodes, decodes into a map and encodes again: an invalid byte
// of UTF-8, escaped as \ufffd the first time, is the character U+FFFD
// itself the second.
func appendRoundTripped(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return jsonrpc.AppendString(b, s)
	}
	var v strings.Builder
	v.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			v.WriteRune(utf8.RuneError)
		} else {
			v.WriteString(s[i : i+size])
		}
		i += size
	}
	return jsonrpc.AppendString(b, v.String())
}

// appendRoundTrippedInt appends n as the SDK writes a number of an
// update, decoded into a float64 on the way: exact up to 2^53, rounded
// past it.
func appendRoundTrippedInt(b []byte, n int) []byte {
	if n >= -1<<53 && n <= 1<<53 {
		return strconv.AppendInt(b, int64(n), 10)
	}
	return strconv.AppendFloat(b, float64(n), 'f', -1, 64)
}

// appendResult appends the result of a prompt's answer (an
// acp.PromptResponse with no _meta nor userMessageId) as encoding/json
// writes it; false for any other answer.
func appendResult(b []byte, result any, rerr *jsonrpc.Error) ([]byte, bool) {
	r, ok := result.(acp.PromptResponse)
	if !ok || rerr != nil || r.Meta != nil || r.UserMessageId != nil {
		return b, false
	}
	b = append(b, `{"stopReason":`...)
	b = jsonrpc.AppendString(b, string(r.StopReason))
	if u := r.Usage; u != nil {
		b = append(b, `,"usage":{`...)
		if u.CachedReadTokens != nil {
			b = append(b, `"cachedReadTokens":`...)
			b = strconv.AppendInt(b, int64(*u.CachedReadTokens), 10)
			b = append(b, ',')
		}
		if u.CachedWriteTokens != nil {
			b = append(b, `"cachedWriteTokens":`...)
			b = strconv.AppendInt(b, int64(*u.CachedWriteTokens), 10)
			b = append(b, ',')
		}
		b = append(b, `"inputTokens":`...)
		b = strconv.AppendInt(b, int64(u.InputTokens), 10)
		b = append(b, `,"outputTokens":`...)
		b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
		if u.ThoughtTokens != nil {
			b = append(b, `,"thoughtTokens":`...)
			b = strconv.AppendInt(b, int64(*u.ThoughtTokens), 10)
		}
		b = append(b, `,"totalTokens":`...)
		b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
		b = append(b, '}')
	}
	return append(b, '}'), true
}
