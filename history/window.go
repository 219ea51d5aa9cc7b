package history

import "fmt"

// The window cap: a session never sends the model more than its context
// window. Compression keeps the history small while it works; when it
// fails, or a turn's tool results pile up, the oldest messages are left
// out of the request — not out of the history, which the session file and
// /compact still have — and the model reads a marker saying so. Sizes are
// the estimate's: four bytes a token, ImageTokens an image.

// ImageTokens is what one image is counted as: vision models spend from
// about 600 (llava) to 1,600 (Claude) tokens on a picture, whatever its
// bytes; counting its base64 text would overestimate it a hundredfold.
const ImageTokens = 1000

// Chars is a message's size in bytes as the window estimate counts it:
// its content (ContentChars) and 4 for its role and framing.
func Chars(m *Message) int { return ContentChars(m) + 4 }

// ContentChars is the bytes of what a message says: its text, its tool
// calls' names and arguments, and 4×ImageTokens an image.
func ContentChars(m *Message) int {
	n := len(m.Content) + 4*ImageTokens*len(m.Images)
	if m.Summary {
		n += len(SummaryFrame)
	}
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

// Estimate is the history's size in tokens as the window estimate counts
// it: four bytes a token.
func Estimate(h []Message) int {
	n := 0
	for i := range h {
		n += Chars(&h[i])
	}
	return n / 4
}

// TooLarge says why a prompt cannot be sent at all, "" when it fits: with
// the system prompt (system) and the tool definitions (tools bytes), it
// alone is over limit, the bytes a request may hold. window is the model's
// context window in tokens, which the reason names; a limit of 0 means
// no cap.
func TooLarge(system, user *Message, tools, limit, window int) string {
	if limit == 0 || Chars(system)+Chars(user) <= limit {
		return ""
	}
	if fixed := Chars(system) + tools; fixed >= 4*window*3/4 {
		return fmt.Sprintf("the model's context window of %d tokens is too small for mm: the system prompt and the tool definitions alone take about %d tokens, and the answer needs room too (set model.contextWindow to the server's real window, or use a model with a larger one)",
			window, fixed/4)
	}
	return fmt.Sprintf("the prompt is too large for the model: about %d tokens (%d with the system prompt and the tool definitions), and the model's context window is %d tokens",
		Chars(user)/4, (Chars(system)+Chars(user)+tools)/4, window)
}

// Fit returns the messages of a model call within limit bytes (0: no cap)
// from h, whose first message is the system prompt and whose current turn
// starts at turnStart (its question): the whole history when it fits, else
// the system prompt and the newest turns that fit, the first of them
// marked. When even the current turn does not fit, its question is kept
// with the newest of its model calls and their results. left is how many
// messages were left out; err is set when not even that fits (window, the
// context window in tokens, is named there).
//
// It walks back from the newest message and stops at the limit, so its
// cost is that of the request, not of the history. h is never modified; a
// returned message that differs (a marker) is a copy.
func Fit(h []Message, turnStart, limit, window int) (msgs []Message, left int, err string) {
	whole := h[:len(h):len(h)]
	if limit == 0 {
		return whole, 0, ""
	}
	start, used := fits(h, 1, Chars(&h[0]), limit)
	if start == 1 {
		return whole, 0, ""
	}
	// The oldest turn start from which the rest fits. The marker joins
	// that message, so it must fit too.
	q := min(turnStart, len(h)-1)
	for i := start; i <= q; i++ {
		if h[i].Role == RoleUser {
			note := fmt.Sprintf("[%d earlier messages of this conversation are left out of this request: they no longer fit your context window. The user still sees them; ask if you need something from them.]\n\n", i-1)
			if used+len(note) <= limit {
				first := h[i]
				first.Content = note + first.Content
				msgs = append(append(append(make([]Message, 0, len(h)-i+1), h[0]), first), h[i+1:]...)
				return msgs, i - 1, ""
			}
		}
		used -= Chars(&h[i])
	}
	// The current turn alone is too big: keep its question, then the
	// newest model calls with their results.
	question := h[q]
	note := "\n\n[Earlier model calls of this turn and their results are left out of this request: they no longer fit your context window.]"
	start, _ = fits(h, q+1, Chars(&h[0])+Chars(&question)+len(note), limit)
	for j := start; j < len(h); j++ {
		if h[j].Role != RoleAssistant {
			continue
		}
		question.Content += note
		msgs = append(append(append(make([]Message, 0, len(h)-j+2), h[0]), question), h[j:]...)
		return msgs, j - 2, ""
	}
	return nil, 0, fmt.Sprintf("the conversation no longer fits the model's context window of %d tokens, not even the question and the last tool results (about %d tokens): use /compact or /new",
		window, (Chars(&question)+Chars(&h[len(h)-1]))/4)
}

// fits returns the first index at or after from from which h's messages
// fit in limit bytes with used already taken (len(h) when none does), and
// the bytes then used.
func fits(h []Message, from, used, limit int) (int, int) {
	i := len(h)
	for i > from && used+Chars(&h[i-1]) <= limit {
		used += Chars(&h[i-1])
		i--
	}
	return i, used
}
