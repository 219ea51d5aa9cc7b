package lsp

import (
	"errors"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"go.lsp.dev/protocol"
)

// LSP counts lines from 0 and characters in UTF-16 code units, the model
// counts both from 1 and characters as runes: "é" is one unit and one rune
// (two bytes), "😀" two units and one rune (four bytes).

// lines splits a text into its lines, without their "\n" or "\r\n". A final
// newline ends the last line rather than starting an empty one.
func lines(text string) []string {
	ls := strings.Split(text, "\n")
	if len(ls) > 1 && ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(l, "\r")
	}
	return ls
}

// toUTF16 converts a 0-based rune index within line into UTF-16 code
// units; an index past the end counts to the end.
func toUTF16(line string, runes int) uint32 {
	var units uint32
	i := 0
	for _, r := range line {
		if i == runes {
			break
		}
		units += uint32(utf16.RuneLen(r))
		i++
	}
	return units
}

// fromUTF16 converts UTF-16 code units within line into a 0-based rune
// index. An offset past the end of the line counts to its end, and one in
// the middle of a surrogate pair to the rune it splits.
func fromUTF16(line string, units uint32) int {
	var n uint32
	i := 0
	for _, r := range line {
		if n >= units {
			break
		}
		n += uint32(utf16.RuneLen(r))
		if n > units {
			break
		}
		i++
	}
	return i
}

// offset converts an LSP position into a byte offset in text. A line past
// the end is the end of the text, a character past the end of its line
// the end of the line (before its "\r\n"), as the protocol says.
func offset(text string, starts []int, p protocol.Position) int {
	if int(p.Line) >= len(starts) {
		return len(text)
	}
	start := starts[p.Line]
	end := len(text)
	if i := strings.IndexByte(text[start:], '\n'); i >= 0 {
		end = start + i
		if end > start && text[end-1] == '\r' {
			end--
		}
	}
	var units uint32
	for i, r := range text[start:end] {
		if units >= p.Character {
			return start + i
		}
		units += uint32(utf16.RuneLen(r))
		if units > p.Character {
			return start + i
		}
	}
	return end
}

// lineStarts returns the byte offset of the start of every line of text.
func lineStarts(text string) []int {
	starts := []int{0}
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// applyEdits applies a file's text edits to its text. The edits' ranges
// refer to the text before any of them, so they are applied from the last
// to the first; inserts at one position keep their order in the list.
// Overlapping edits are an error, as the protocol forbids them.
func applyEdits(text string, edits []protocol.TextEdit) (string, error) {
	type span struct {
		start, end, index int
		text              string
	}
	starts := lineStarts(text)
	spans := make([]span, len(edits))
	for i, e := range edits {
		s, en := offset(text, starts, e.Range.Start), offset(text, starts, e.Range.End)
		if en < s {
			return "", errors.New("the server sent an edit whose end is before its start")
		}
		spans[i] = span{s, en, i, e.NewText}
	}
	sort.Slice(spans, func(a, b int) bool {
		if spans[a].start != spans[b].start {
			return spans[a].start < spans[b].start
		}
		return spans[a].index < spans[b].index
	})
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return "", errors.New("the server sent overlapping edits")
		}
	}
	out := text
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		out = out[:s.start] + s.text + out[s.end:]
	}
	return out, nil
}

// filePath returns the path of a file URI. uri.URI's Filename panics on
// other schemes and on URIs it cannot parse, which servers do send (jdt://,
// untitled:, deno:), so they are told apart here.
func filePath(u protocol.DocumentURI) (string, bool) {
	p, err := url.Parse(string(u))
	if err != nil || p.Scheme != "file" || p.Path == "" {
		return "", false
	}
	return filepath.FromSlash(p.Path), true
}

// place names an LSP location for the model: a path when it is a file,
// the URI otherwise.
func place(u protocol.DocumentURI) string {
	if p, ok := filePath(u); ok {
		return p
	}
	return string(u)
}

// isWordRune says whether r can be part of an identifier in the languages
// served here.
func isWordRune(r rune) bool {
	return r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// wordAt returns the identifier under the 0-based rune index col of line,
// or just before it (a cursor right after a name is on the name), and ""
// when there is none.
func wordAt(line string, col int) string {
	rs := []rune(line)
	i := col
	if i >= len(rs) || !isWordRune(rs[i]) {
		i--
	}
	if i < 0 || i >= len(rs) || !isWordRune(rs[i]) {
		return ""
	}
	start, end := i, i
	for start > 0 && isWordRune(rs[start-1]) {
		start--
	}
	for end < len(rs) && isWordRune(rs[end]) {
		end++
	}
	return string(rs[start:end])
}

// oneLine folds a message onto one line, for the model.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var parts []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
