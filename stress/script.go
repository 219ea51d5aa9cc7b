package stress

import (
	"fmt"
	"strings"
)

// kind is what a turn does.
type kind uint8

const (
	kindPing   kind = iota // a streamed answer
	kindBash               // bash `true`, then an answer
	kindEdit               // write_file, then an answer
	kindAsk                // write_file to a sensitive path: asks permission, then an answer
	kindCancel             // bash `sleep 30`, cancelled by the harness
	kindFail               // the model server fails the call
)

var kindNames = [...]string{"ping", "bash", "edit", "ask", "cancel", "fail"}

func (k kind) String() string { return kindNames[k] }

// words is the tail of every answer: w1 … wN, one streamed delta each, so
// the checker can tell a lost, duplicated or reordered chunk. The common
// counts are built once: the checker asks for them every turn.
func words(n int) string {
	if n < len(wordsCache) {
		return wordsCache[n]
	}
	return buildWords(n)
}

var wordsCache = func() (c [65]string) {
	for i := range c {
		c[i] = buildWords(i)
	}
	return c
}()

func buildWords(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, " w%d", i)
	}
	return b.String()
}

// script is the scripted model's YAML for a run. Every answer echoes the
// prompt ("<kind> s<session> t<turn>"), so an update that reaches the wrong
// session or turn is seen.
func script(c *Config) string {
	w := words(c.Words)
	answer := `{text: "re: {{last_user_text}}` + w + `"}`
	return fmt.Sprintf(`latency: %s
tokensPerSec: %g
usage: true
rules:
  - match: "^ping "
    steps: [%[3]s]
  - match: "^bash "
    steps:
      - toolCalls: [{name: bash, args: {command: "true"}}]
      - %[3]s
  - match: "^edit "
    steps:
      - toolCalls: [{name: write_file, args: {path: "notes.txt", content: "stress\n"}}]
      - %[3]s
  - match: "^ask "
    steps:
      - toolCalls: [{name: write_file, args: {path: ".env.stress", content: "X=1\n"}}]
      - %[3]s
  - match: "^cancel "
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 30"}}]
      - {text: "not reached"}
  - match: "^fail "
    steps: [{error: "scripted failure"}]
`, c.Latency, c.TokensPerS, answer)
}
