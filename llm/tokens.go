package llm

import "github.com/mm-agent/mm/history"

// EstimateTokens is a rough token count of msgs (four characters a token,
// history.ImageTokens an image), for when a server reports no usage and for the
// scripted provider's usage.
func EstimateTokens(msgs []history.Message) int {
	chars := 0
	for i := range msgs {
		chars += history.ContentChars(&msgs[i])
	}
	return (chars + 3) / 4
}

// NextWord splits the first streamed "token" off text: its leading
// whitespace and the word after it. The scripted provider and the HTTP
// fixture stream text this way, so the pieces concatenate back to text.
func NextWord(text string) (word, rest string) {
	i := 0
	for i < len(text) && isSpace(text[i]) {
		i++
	}
	for i < len(text) && !isSpace(text[i]) {
		i++
	}
	return text[:i], text[i:]
}

// countWords is the number of pieces NextWord cuts text into.
func countWords(text string) int {
	n := 0
	for text != "" {
		_, text = NextWord(text)
		n++
	}
	return n
}

// isSpace reports ASCII whitespace. Bytes of multi-byte UTF-8 sequences are
// never ASCII, so splitting on these never cuts a character in two.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f'
}
