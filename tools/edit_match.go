package tools

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// When old_text is not in the file as given, edit_file tries a ladder of
// more tolerant matches, each forgiving what models commonly get wrong when
// they copy text, and takes the first level that matches exactly one place:
//
//  1. the file's CRLF line endings for old_text's newlines;
//  2. trailing whitespace (spaces, tabs, a CR) at the ends of lines;
//  3. and Unicode punctuation and spaces: curly quotes, en and em dashes
//     and other dashes, non-breaking and other odd spaces, a BOM;
//  4. and indentation, line by line, whole lines only: new_text is then
//     re-indented by the same offset, in the file's own indentation.
//
// old_text copied from read_file with its line numbers (every line with
// one, counting up) is tried without them, on the same ladder, and so is
// new_text when it carries them too. A level that matches more than one
// place is an error naming them: a more tolerant one could only match
// more. When nothing matches, the error quotes the lines of the file that
// look most like old_text, numbered as read_file shows them.

// editMatch is where old_text landed, and how.
type editMatch struct {
	start, end int    // bytes of the file replaced
	newText    string // what replaces them
	// how says what was forgiven, "" for an exact match; it completes
	// "old_text matched after …".
	how string
}

// region is bytes [start, end) of the file.
type region struct{ start, end int }

// ambiguous is a level that matched more than one place.
type ambiguous struct {
	how     string
	regions []region
}

// findTolerant runs the ladder on text for oldText, which is not in text
// as given. It returns the match, or nil and, when a level matched more
// than one place, that level.
func findTolerant(text, oldText, newText string) (*editMatch, *ambiguous) {
	m, amb := ladder(text, oldText, newText)
	if m != nil || amb != nil {
		return m, amb
	}
	bare, ok := stripNumbers(oldText)
	if !ok {
		return nil, nil
	}
	newBare := newText
	if n, ok := stripNumbers(newText); ok {
		newBare = n
	}
	const how = "removing the line numbers copied from read_file"
	if k := strings.Count(text, bare); k == 1 {
		i := strings.Index(text, bare)
		return &editMatch{start: i, end: i + len(bare), newText: newBare, how: how}, nil
	} else if k > 1 {
		return nil, &ambiguous{how: how, regions: occurrences(text, bare)}
	}
	m, amb = ladder(text, bare, newBare)
	if m != nil {
		m.how = how + " and " + m.how
	}
	if amb != nil {
		amb.how = how + " and " + amb.how
	}
	return m, amb
}

// ladder tries the levels after the exact one.
func ladder(text, oldText, newText string) (*editMatch, *ambiguous) {
	// 1. CRLF: models write "\n" where a Windows file has "\r\n".
	if strings.Contains(text, "\r\n") && strings.Contains(oldText, "\n") && !strings.Contains(oldText, "\r\n") {
		crlf := strings.ReplaceAll(oldText, "\n", "\r\n")
		if rs := occurrences(text, crlf); len(rs) == 1 {
			return &editMatch{start: rs[0].start, end: rs[0].end, newText: withLineEnds(newText, true)}, nil
		} else if len(rs) > 1 {
			return nil, &ambiguous{how: "using the file's CRLF line endings", regions: rs}
		}
	}
	levels := []struct {
		how  string
		norm func(rune) (rune, bool)
	}{
		{"ignoring trailing whitespace", nil},
		{"ignoring trailing whitespace and Unicode quotes, dashes and spaces", asciiPunct},
	}
	for _, l := range levels {
		v := newView(text, l.norm)
		pat := newView(oldText, l.norm).text
		if strings.TrimSpace(pat) == "" {
			return nil, nil
		}
		rs := occurrences(v.text, pat)
		if len(rs) > 1 {
			for i := range rs {
				rs[i] = v.original(rs[i])
			}
			return nil, &ambiguous{how: l.how, regions: rs}
		}
		if len(rs) == 1 {
			r := v.original(rs[0])
			return &editMatch{start: r.start, end: r.end, newText: withLineEnds(newText, strings.Contains(text[r.start:r.end], "\r\n")), how: l.how}, nil
		}
	}
	return indentMatch(text, oldText, newText)
}

// occurrences are the places where pat is in text, not overlapping.
func occurrences(text, pat string) []region {
	var out []region
	for i := 0; pat != "" && i <= len(text); {
		j := strings.Index(text[i:], pat)
		if j < 0 {
			break
		}
		out = append(out, region{i + j, i + j + len(pat)})
		i += j + len(pat)
	}
	return out
}

// withLineEnds writes s with the file's CRLF line endings when crlf is
// set and s has none of its own.
func withLineEnds(s string, crlf bool) string {
	if !crlf || strings.Contains(s, "\r\n") {
		return s
	}
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// view is a text as a level of the ladder compares it: trailing
// whitespace dropped and, with norm, characters mapped; each of its bytes
// knows the original bytes it stands for.
type view struct {
	text       string
	start, end []int // the original [start, end) of the rune each byte is from
}

func newView(s string, norm func(rune) (rune, bool)) view {
	var b strings.Builder
	var v view
	b.Grow(len(s))
	lineStart := 0
	for lineStart <= len(s) {
		nl := strings.IndexByte(s[lineStart:], '\n')
		lineEnd := len(s)
		if nl >= 0 {
			lineEnd = lineStart + nl
		}
		line := strings.TrimRight(s[lineStart:lineEnd], " \t\r")
		for i, r := range line {
			size := utf8.RuneLen(r)
			if r == utf8.RuneError {
				size = 1
			}
			if norm != nil {
				var keep bool
				if r, keep = norm(r); !keep {
					continue
				}
			}
			n, _ := b.WriteRune(r)
			for range n {
				v.start = append(v.start, lineStart+i)
				v.end = append(v.end, lineStart+i+size)
			}
		}
		if nl < 0 {
			break
		}
		b.WriteByte('\n')
		v.start = append(v.start, lineEnd)
		v.end = append(v.end, lineEnd+1)
		lineStart = lineEnd + 1
	}
	v.text = b.String()
	return v
}

// original is the region of the original text a region of the view
// covers.
func (v view) original(r region) region {
	return region{v.start[r.start], v.end[r.end-1]}
}

// asciiPunct maps the Unicode punctuation and spaces models write as ASCII
// (or the other way round) to ASCII, and drops a BOM.
func asciiPunct(r rune) (rune, bool) {
	switch r {
	case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212':
		return '-', true
	case '\u2018', '\u2019', '\u201A', '\u201B', '\u2032':
		return '\'', true
	case '\u201C', '\u201D', '\u201E', '\u201F', '\u2033':
		return '"', true
	case '\u2026':
		return '.', true // an ellipsis, for the first of three dots
	case '\uFEFF', '\u200B':
		return 0, false
	}
	if r != ' ' && r != '\t' && r != '\n' && r != '\r' && unicode.IsSpace(r) {
		return ' ', true
	}
	return r, true
}

// numberedRE is a line as read_file and other agents' read tools number
// it: spaces, the number, then a tab, an arrow, a bar or ": ".
var numberedRE = regexp.MustCompile(`^ *(\d+)(?:\t|→|\||: )`)

// stripNumbers removes the line numbers from s when every line of it
// carries one and they count up by one: text copied with them from
// read_file. A last empty line (s ends with a newline) needs none.
func stripNumbers(s string) (string, bool) {
	lines := strings.Split(s, "\n")
	if len(lines) > 1 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else if len(lines) == 1 && lines[0] == "" {
		return "", false
	}
	prev := -1
	for i, l := range lines {
		m := numberedRE.FindStringSubmatch(l)
		if m == nil {
			return "", false
		}
		n, err := strconv.Atoi(m[1])
		if err != nil || (prev >= 0 && n != prev+1) {
			return "", false
		}
		prev = n
		lines[i] = l[len(m[0]):]
	}
	out := strings.Join(lines, "\n")
	if strings.HasSuffix(s, "\n") {
		out += "\n"
	}
	return out, true
}

// indentMatch compares whole lines with their indentation left out (and
// trailing whitespace and Unicode punctuation forgiven); on a single
// match, new_text is re-indented by the offset between old_text's
// indentation and the file's, in the file's indentation unit.
func indentMatch(text, oldText, newText string) (*editMatch, *ambiguous) {
	const how = "ignoring indentation (new_text re-indented to match)"
	pat := strings.Split(strings.TrimSuffix(oldText, "\n"), "\n")
	keyOf := func(l string) string { return strings.TrimSpace(newView(l, asciiPunct).text) }
	keys := make([]string, len(pat))
	blank := true
	for i, l := range pat {
		keys[i] = keyOf(l)
		blank = blank && keys[i] == ""
	}
	if blank {
		return nil, nil
	}
	lines := splitLines(text)
	fileKeys := make([]string, len(lines))
	for i, l := range lines {
		fileKeys[i] = keyOf(l.text)
	}
	var found []int
	for i := 0; i+len(keys) <= len(lines); i++ {
		ok := true
		for j, k := range keys {
			if fileKeys[i+j] != k {
				ok = false
				break
			}
		}
		if ok {
			found = append(found, i)
			i += len(keys) - 1
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	last := func(i int) line { return lines[i+len(keys)-1] }
	if len(found) > 1 {
		amb := &ambiguous{how: how}
		for _, i := range found {
			amb.regions = append(amb.regions, region{lines[i].start, last(i).end})
		}
		return nil, amb
	}
	i := found[0]
	start, end := lines[i].start, last(i).end
	if strings.HasSuffix(oldText, "\n") && end < len(text) {
		end++ // the newline old_text ends with
	}
	var matched []string
	for _, l := range lines[i : i+len(keys)] {
		matched = append(matched, l.text)
	}
	reindented := reindent(newText, pat, matched, indentUnit(lineTexts(lines)))
	return &editMatch{start: start, end: end, newText: withLineEnds(reindented, strings.Contains(text[start:end], "\r\n")), how: how}, nil
}

type line struct {
	text       string // without its newline (nor a CR)
	start, end int    // its bytes, newline excluded
}

func splitLines(s string) []line {
	var out []line
	for start := 0; start <= len(s); {
		end := strings.IndexByte(s[start:], '\n')
		if end < 0 {
			if start < len(s) {
				out = append(out, line{strings.TrimSuffix(s[start:], "\r"), start, len(s)})
			}
			break
		}
		end += start
		out = append(out, line{strings.TrimSuffix(s[start:end], "\r"), start, end})
		start = end + 1
	}
	return out
}

func lineTexts(ls []line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.text
	}
	return out
}

// leading is a line's indentation.
func leading(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

// indentUnit is the indentation lines use: a tab, or the smallest number
// of spaces a line is indented by; "" when no line is indented.
func indentUnit(lines []string) string {
	spaces := 0
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := leading(l)
		if strings.Contains(lead, "\t") {
			return "\t"
		}
		if n := len(lead); n > 0 && (spaces == 0 || n < spaces) {
			spaces = n
		}
	}
	if spaces == 0 {
		return ""
	}
	return strings.Repeat(" ", spaces)
}

// depth is how many units deep an indentation is (a tab counts as one
// unit of spaces).
func depth(lead, unit string) int {
	if unit == "" {
		return 0
	}
	if unit == "\t" {
		return strings.Count(lead, "\t") + strings.Count(lead, " ")/4
	}
	return (strings.Count(lead, " ") + len(unit)*strings.Count(lead, "\t")) / len(unit)
}

// firstLead is the indentation of the first line that is not blank.
func firstLead(lines []string) (string, bool) {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return leading(l), true
		}
	}
	return "", false
}

// reindent moves newText by the offset from old's indentation to the
// matched lines', in fileUnit: each line keeps its depth relative to
// old_text's first line.
func reindent(newText string, old, matched []string, fileUnit string) string {
	oldLead, ok1 := firstLead(old)
	fileLead, ok2 := firstLead(matched)
	if !ok1 || !ok2 || oldLead == fileLead && (fileUnit == "" || !mixedUnits(newText, fileUnit)) {
		return newText
	}
	oldUnit := indentUnit(old)
	if oldUnit == "" {
		oldUnit = indentUnit(strings.Split(newText, "\n"))
	}
	if oldUnit == "" {
		oldUnit = fileUnit
	}
	if fileUnit == "" {
		fileUnit = oldUnit
	}
	offset := depth(fileLead, fileUnit) - depth(oldLead, oldUnit)
	lines := strings.Split(newText, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		d := max(depth(leading(l), oldUnit)+offset, 0)
		lines[i] = strings.Repeat(fileUnit, d) + strings.TrimLeft(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// mixedUnits says whether text is indented with another unit than unit.
func mixedUnits(text, unit string) bool {
	u := indentUnit(strings.Split(text, "\n"))
	return u != "" && (u == "\t") != (unit == "\t")
}

// lineOf is the line (from 1) that byte off of text is on.
func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// lineSpan writes a region's lines: "12" or "12-15".
func lineSpan(text string, r region) string {
	a, b := lineOf(text, r.start), lineOf(text, max(r.end-1, r.start))
	if a == b {
		return strconv.Itoa(a)
	}
	return fmt.Sprintf("%d-%d", a, b)
}

// closest quotes the lines of text that look most like oldText, numbered
// as read_file shows them, with a line of context around; "" when no line
// of the file resembles any of old_text's.
func closest(text, oldText string) string {
	pat := strings.Split(strings.TrimSuffix(oldText, "\n"), "\n")
	if bare, ok := stripNumbers(oldText); ok {
		pat = strings.Split(strings.TrimSuffix(bare, "\n"), "\n")
	}
	lines := lineTexts(splitLines(text))
	if len(lines) == 0 {
		return ""
	}
	key := func(s string) string { return strings.Join(strings.Fields(newView(s, asciiPunct).text), " ") }
	at := map[string][]int{}
	for i, l := range lines {
		if k := key(l); k != "" {
			at[k] = append(at[k], i)
		}
	}
	// Windows whose lines equal old_text's, whitespace and punctuation
	// aside, scored by how many do.
	score := map[int]int{}
	for j, p := range pat {
		for _, i := range at[key(p)] {
			score[i-j]++
		}
	}
	best, bestScore := 0, 0
	for s, n := range score {
		if n > bestScore || n == bestScore && s < best {
			best, bestScore = s, n
		}
	}
	if bestScore == 0 {
		// No line equal: the line most like old_text's first non-blank
		// one, if it is like it at all.
		j := 0
		for j < len(pat) && strings.TrimSpace(pat[j]) == "" {
			j++
		}
		if j == len(pat) {
			return ""
		}
		want := key(pat[j])
		bestSim := 0.5
		found := false
		for i, l := range lines {
			if sim := similarity(want, key(l)); sim > bestSim {
				best, bestSim, found = i-j, sim, true
			}
		}
		if !found {
			return ""
		}
	}
	from, to := max(best-1, 0), min(best+len(pat)+1, len(lines))
	if to-from > 40 {
		to = from + 40
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the lines most like it are %d-%d:\n", max(best, 0)+1, min(best+len(pat), len(lines)))
	for i := from; i < to; i++ {
		l := lines[i]
		if len(l) > 200 {
			l = l[:validPrefix(l, 200)] + " […]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, l)
	}
	return b.String()
}

// similarity is the Dice coefficient of two strings' character bigrams: 1
// for equal strings, 0 for strings that share none.
func similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	if len(a) < 2 || len(b) < 2 {
		return 0
	}
	grams := map[string]int{}
	for i := 0; i+1 < len(a); i++ {
		grams[a[i:i+2]]++
	}
	common := 0
	for i := 0; i+1 < len(b); i++ {
		if grams[b[i:i+2]] > 0 {
			grams[b[i:i+2]]--
			common++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b)-2)
}
