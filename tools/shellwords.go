package tools

import (
	"os"
	"path/filepath"
	"strings"
)

// A bash command is checked against tools.sensitive through the words it
// names: `cat .env` reads a secret as surely as read_file .env does. This is
// a guard rail, not a sandbox: what a command computes at run time (a path
// built from pieces, a file an interpreter opens, a hard link) is out of its
// sight; docs/tools.md says so.

// maxShellWords bounds the words and glob matches looked at in one command.
const maxShellWords = 512

// commandPaths returns the absolute paths a command line names: each of its
// words resolved as the file tools resolve paths (relative to cwd, ~, quotes
// removed), the values of VAR=value and --flag=value words, and the files
// that a word's glob matches now.
func commandPaths(cwd, command string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] && len(out) < maxShellWords {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, w := range shellWords(command) {
		for _, v := range wordValues(w) {
			if v.text == "" || v.text == "-" {
				continue
			}
			abs := Resolve(cwd, v.text)
			if v.glob && strings.ContainsAny(v.text, "*?[") {
				matches, _ := filepath.Glob(abs)
				for _, m := range matches {
					add(m)
				}
			}
			add(abs)
		}
	}
	return out
}

// shellWord is a word of a command line with its quoting undone; glob says
// whether any of it was unquoted (so the shell would expand * and ?).
type shellWord struct {
	text string
	glob bool
}

// wordValues returns the values a word may name a path with: the word, and
// what follows the = of NAME=value or --flag=value.
func wordValues(w shellWord) []shellWord {
	out := []shellWord{w}
	if i := strings.IndexByte(w.text, '='); i > 0 {
		out = append(out, shellWord{text: w.text[i+1:], glob: w.glob})
	}
	return out
}

// shellWords splits a bash command line into words the way bash does for
// the cases that name files: quotes and backslashes are undone, $VAR and
// ${VAR} take their value from mm's environment, and operators (; & | ( )
// < > and newlines) separate words, so `cat<.env` and `x=$(cat .env)` name
// .env too. A # that starts a word starts a comment.
func shellWords(line string) []shellWord {
	var words []shellWord
	var cur strings.Builder
	inWord, glob := false, false
	flush := func() {
		if inWord && len(words) < maxShellWords {
			words = append(words, shellWord{text: cur.String(), glob: glob})
		}
		cur.Reset()
		inWord, glob = false, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			inWord = true
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				cur.WriteString(line[i+1:])
				i = len(line)
				continue
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			i = doubleQuoted(line, i+1, &cur)
		case c == '\\':
			if i+1 < len(line) && line[i+1] != '\n' {
				inWord = true
				cur.WriteByte(line[i+1])
			}
			i++
		case c == '$':
			inWord = true
			i = variable(line, i, &cur)
		case c == '#' && !inWord:
			for i < len(line) && line[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || strings.IndexByte(";&|()<>`", c) >= 0:
			flush()
		default:
			inWord = true
			if c == '*' || c == '?' || c == '[' {
				glob = true
			}
			cur.WriteByte(c)
		}
	}
	flush()
	return words
}

// doubleQuoted copies a "…" string starting at i (after the quote) into
// cur, and returns the index of its closing quote.
func doubleQuoted(line string, i int, cur *strings.Builder) int {
	for ; i < len(line); i++ {
		switch c := line[i]; c {
		case '"':
			return i
		case '\\':
			if i+1 < len(line) && strings.IndexByte("\"\\$`\n", line[i+1]) >= 0 {
				i++
				if line[i] != '\n' {
					cur.WriteByte(line[i])
				}
				continue
			}
			cur.WriteByte(c)
		case '$':
			i = variable(line, i, cur)
		default:
			cur.WriteByte(c)
		}
	}
	return i
}

// variable expands $NAME or ${NAME} at i into cur from the environment, and
// returns the index of its last byte; a $ that starts no name is kept, and
// $( ends the word (what follows is a command of its own).
func variable(line string, i int, cur *strings.Builder) int {
	if i+1 >= len(line) {
		cur.WriteByte('$')
		return i
	}
	if line[i+1] == '(' {
		return i // $(: the ( ends the word
	}
	if line[i+1] == '{' {
		j := strings.IndexByte(line[i+2:], '}')
		if j < 0 {
			return len(line)
		}
		name := line[i+2 : i+2+j]
		if k := strings.IndexAny(name, ":-=?+#%/"); k >= 0 {
			name = name[:k] // ${X:-default} and the like: X's value
		}
		cur.WriteString(os.Getenv(name))
		return i + 2 + j
	}
	j := i + 1
	for j < len(line) && (line[j] == '_' || isAlnum(line[j])) {
		j++
	}
	if j == i+1 {
		cur.WriteByte('$')
		return i
	}
	cur.WriteString(os.Getenv(line[i+1 : j]))
	return j - 1
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
