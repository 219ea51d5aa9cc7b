package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"
)

// The session/update notifications a turn sends most (answer chunks and
// usage) are encoded here directly: the SDK's encoder marshals every
// update three times (marshal, unmarshal to a map, marshal), which made the
// single writer the bottleneck under load. Anything else goes through the
// SDK's types. The output is the same JSON-RPC message.

// appendUpdate appends one session/update notification line.
func appendUpdate(buf []byte, sessionID string, u *acp.SessionUpdate) ([]byte, error) {
	switch {
	case u.AgentMessageChunk != nil && u.AgentMessageChunk.MessageId == nil && u.AgentMessageChunk.Content.Text != nil && textOnly(u.AgentMessageChunk.Content.Text):
		return appendChunk(buf, sessionID, "agent_message_chunk", u.AgentMessageChunk.Content.Text.Text, u.AgentMessageChunk.Meta)
	case u.AgentThoughtChunk != nil && u.AgentThoughtChunk.MessageId == nil && u.AgentThoughtChunk.Content.Text != nil && textOnly(u.AgentThoughtChunk.Content.Text):
		return appendChunk(buf, sessionID, "agent_thought_chunk", u.AgentThoughtChunk.Content.Text.Text, u.AgentThoughtChunk.Meta)
	case u.UserMessageChunk != nil && u.UserMessageChunk.MessageId == nil && u.UserMessageChunk.Content.Text != nil && textOnly(u.UserMessageChunk.Content.Text):
		// Replays send one per stored question.
		return appendChunk(buf, sessionID, "user_message_chunk", u.UserMessageChunk.Content.Text.Text, u.UserMessageChunk.Meta)
	case u.UsageUpdate != nil && u.UsageUpdate.Meta == nil && u.UsageUpdate.Cost == nil:
		buf = appendHead(buf, sessionID)
		buf = append(buf, `{"sessionUpdate":"usage_update","size":`...)
		buf = strconv.AppendInt(buf, int64(u.UsageUpdate.Size), 10)
		buf = append(buf, `,"used":`...)
		buf = strconv.AppendInt(buf, int64(u.UsageUpdate.Used), 10)
		return append(buf, "}}}\n"...), nil
	}
	params, err := json.Marshal(acp.SessionNotification{SessionId: acp.SessionId(sessionID), Update: *u})
	if err != nil {
		return buf, err
	}
	buf = append(buf, `{"jsonrpc":"2.0","method":"session/update","params":`...)
	buf = append(buf, params...)
	return append(buf, "}\n"...), nil
}

func textOnly(t *acp.ContentBlockText) bool { return t.Meta == nil && t.Annotations == nil }

func appendHead(buf []byte, sessionID string) []byte {
	buf = append(buf, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":`...)
	buf = appendString(buf, sessionID)
	return append(buf, `,"update":`...)
}

func appendChunk(buf []byte, sessionID, kind, text string, meta map[string]any) ([]byte, error) {
	buf = appendHead(buf, sessionID)
	buf = append(buf, '{')
	if meta != nil {
		m, err := json.Marshal(meta)
		if err != nil {
			return buf, err
		}
		buf = append(buf, `"_meta":`...)
		buf = append(buf, m...)
		buf = append(buf, ',')
	}
	buf = append(buf, `"content":{"text":`...)
	buf = appendString(buf, text)
	buf = append(buf, `,"type":"text"},"sessionUpdate":"`...)
	buf = append(buf, kind...)
	return append(buf, "\"}}}\n"...), nil
}

// appendString appends s as a JSON string.
func appendString(buf []byte, s string) []byte {
	if !utf8.ValidString(s) {
		b, _ := json.Marshal(s) // replaces invalid bytes as encoding/json does
		return append(buf, b...)
	}
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// mergeable says whether next can be folded into prev, for the same
// session with nothing of that session between them: text chunks of the
// same kind concatenate, and a usage_update supersedes the one before.
func mergeable(prev, next *acp.SessionUpdate) bool {
	switch {
	case prev.AgentMessageChunk != nil && next.AgentMessageChunk != nil:
		return plainChunk(prev.AgentMessageChunk.Meta, prev.AgentMessageChunk.MessageId, prev.AgentMessageChunk.Content) &&
			plainChunk(next.AgentMessageChunk.Meta, next.AgentMessageChunk.MessageId, next.AgentMessageChunk.Content)
	case prev.AgentThoughtChunk != nil && next.AgentThoughtChunk != nil:
		return plainChunk(prev.AgentThoughtChunk.Meta, prev.AgentThoughtChunk.MessageId, prev.AgentThoughtChunk.Content) &&
			plainChunk(next.AgentThoughtChunk.Meta, next.AgentThoughtChunk.MessageId, next.AgentThoughtChunk.Content)
	case prev.UsageUpdate != nil && next.UsageUpdate != nil:
		return prev.UsageUpdate.Meta == nil && next.UsageUpdate.Meta == nil
	}
	return false
}

func plainChunk(meta map[string]any, id *string, c acp.ContentBlock) bool {
	return meta == nil && id == nil && c.Text != nil && textOnly(c.Text)
}

// mergeRun folds a run of mergeable updates of one session into its first:
// the texts concatenated with one allocation, or the last usage.
func mergeRun(run []outItem) {
	first := &run[0].update
	if first.UsageUpdate != nil {
		first.UsageUpdate = run[len(run)-1].update.UsageUpdate
		return
	}
	text := func(u *acp.SessionUpdate) string {
		if u.AgentMessageChunk != nil {
			return u.AgentMessageChunk.Content.Text.Text
		}
		return u.AgentThoughtChunk.Content.Text.Text
	}
	n := 0
	for i := range run {
		n += len(text(&run[i].update))
	}
	var b strings.Builder
	b.Grow(n)
	for i := range run {
		b.WriteString(text(&run[i].update))
	}
	if first.AgentMessageChunk != nil {
		first.AgentMessageChunk = &acp.SessionUpdateAgentMessageChunk{Content: acp.TextBlock(b.String())}
	} else {
		first.AgentThoughtChunk = &acp.SessionUpdateAgentThoughtChunk{Content: acp.TextBlock(b.String())}
	}
}
