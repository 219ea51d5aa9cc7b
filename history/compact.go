package history

import (
	"fmt"
	"strings"
)

// Compression replaces the turns older than the last few with one summary
// the model writes (actors runs the model call; these are its plan and its
// result).

// Split returns how many messages of h (after the system prompt) lie
// before its last keep turns, and the index where the kept part starts
// (len(h) when keep is 0). A turn starts at a user message that is not a
// summary. With keep turns or fewer there is nothing to compress: 0, len(h).
func Split(h []Message, keep int) (older, cut int) {
	var starts []int
	for i := 1; i < len(h); i++ {
		if m := &h[i]; m.Role == RoleUser && !m.Summary {
			starts = append(starts, i)
		}
	}
	if len(starts) <= keep {
		return 0, len(h)
	}
	cut = len(h)
	if keep > 0 {
		cut = starts[len(starts)-keep]
	}
	return cut - 1, cut
}

// SummaryFrame opens a compaction summary where the model reads it: the
// summary is stored as written (the user sees it so), and framed for the
// model as context handed over, not as a new request of the user's.
const SummaryFrame = "[The summary below replaces the earlier part of this conversation, which was compacted to save room. It is context handed over to you, not a new request from the user: carry on the work from where it stands, without redoing what it says is done.]\n\n"

// ModelText is what the model reads of m: its content, a summary framed
// by SummaryFrame.
func ModelText(m *Message) string {
	if m.Summary {
		return SummaryFrame + m.Content
	}
	return m.Content
}

// Compacted is h once the messages between the system prompt and cut are
// replaced by summary: the system prompt, the summary (a user message
// marked Summary) and h[cut:]. h is not modified.
func Compacted(h []Message, cut int, summary string) []Message {
	out := make([]Message, 0, 2+len(h)-cut)
	out = append(out, h[0], Message{Role: RoleUser, Content: summary, Summary: true})
	return append(out, h[cut:]...)
}

// Transcript renders msgs as text for the summariser, in at most limit
// bytes (0: no limit): the newest messages that fit, after a line counting
// the oldest ones left out. Tool outputs are cut: the summary needs their
// gist, not their bulk.
func Transcript(msgs []Message, limit int) string {
	const maxTool = 2000
	from := 0
	if limit > 0 {
		used := 0
		for from = len(msgs); from > 0; from-- {
			m := &msgs[from-1]
			n := len(m.Content) + 32
			if m.Role == RoleTool {
				n = min(n, maxTool+64)
			}
			for _, c := range m.ToolCalls {
				n += len(c.Name) + len(c.Arguments) + 12
			}
			if used+n > limit-200 {
				break
			}
			used += n
		}
	}
	var b strings.Builder
	if from > 0 {
		fmt.Fprintf(&b, "[the %d oldest messages are left out: they do not fit the model's context window]\n\n", from)
	}
	for i := from; i < len(msgs); i++ {
		m := &msgs[i]
		switch {
		case m.Summary:
			b.WriteString("EARLIER SUMMARY:\n")
		case m.Role == RoleUser:
			b.WriteString("USER:\n")
		case m.Role == RoleAssistant:
			b.WriteString("ASSISTANT:\n")
		case m.Role == RoleTool:
			b.WriteString("TOOL RESULT (" + m.Name + "):\n")
		}
		content := m.Content
		if m.Role == RoleTool && len(content) > maxTool {
			content = content[:maxTool] + fmt.Sprintf("\n[… %d more bytes]", len(content)-maxTool)
		}
		b.WriteString(content)
		for _, c := range m.ToolCalls {
			b.WriteString("\nTOOL CALL " + c.Name + " " + c.Arguments)
		}
		b.WriteString("\n\n")
	}
	return b.String()
}
