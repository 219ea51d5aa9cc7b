package llm

// ImageTokens is what one image is counted as: vision models spend from
// about 600 (llava) to 1,600 (Claude) tokens on a picture, whatever its
// bytes; counting its base64 text would overestimate it a hundredfold.
const ImageTokens = 1000

// EstimateTokens is a rough token count of msgs (four characters a token,
// ImageTokens an image), for when a server reports no usage and for the
// scripted provider's usage.
func EstimateTokens(msgs []Message) int {
	chars := 0
	for i := range msgs {
		m := &msgs[i]
		chars += len(m.Content) + 4*ImageTokens*len(m.Images)
		for _, tc := range m.ToolCalls {
			chars += len(tc.Name) + len(tc.Arguments)
		}
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
