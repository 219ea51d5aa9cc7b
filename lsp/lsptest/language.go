package lsptest

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf16"
)

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	declRE  = regexp.MustCompile(`^\s*(?:func|type|var|const)\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)`)
)

// text is a file's text as this server knows it: the open document's, or
// the disk's.
func (f *fake) text(path string) string {
	f.mu.Lock()
	d := f.docs[path]
	f.mu.Unlock()
	if d != nil {
		return d.text
	}
	b, _ := os.ReadFile(path)
	return string(b)
}

// units counts the UTF-16 code units of s.
func units(s string) int {
	return len(utf16.Encode([]rune(s)))
}

// byteOffset converts a UTF-16 character offset into a byte offset in line.
func byteOffset(line string, char int) int {
	n := 0
	for i, r := range line {
		if n >= char {
			return i
		}
		n += len(utf16.Encode([]rune{r}))
	}
	return len(line)
}

func (f *fake) wordAt(path string, p position) string {
	ls := strings.Split(f.text(path), "\n")
	if p.Line >= len(ls) {
		return ""
	}
	line := ls[p.Line]
	off := byteOffset(line, p.Character)
	for _, loc := range identRE.FindAllStringIndex(line, -1) {
		if loc[0] <= off && off <= loc[1] {
			return line[loc[0]:loc[1]]
		}
	}
	return ""
}

// files lists the files under the root with the extension ext.
func (f *fake) files(ext string) []string {
	f.mu.Lock()
	root := f.root
	f.mu.Unlock()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ext {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// find returns the whole-word occurrences of word, or only its
// declarations, in file order.
func (f *fake) find(ext, word string, declsOnly bool) []location {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(word) + `\b`)
	var out []location
	for _, path := range f.files(ext) {
		for i, line := range strings.Split(f.text(path), "\n") {
			if declsOnly {
				m := declRE.FindStringSubmatchIndex(line)
				if m != nil && line[m[2]:m[3]] == word {
					out = append(out, span(path, i, line, m[2], m[3]))
				}
				continue
			}
			for _, loc := range re.FindAllStringIndex(line, -1) {
				out = append(out, span(path, i, line, loc[0], loc[1]))
			}
		}
	}
	return out
}

func span(path string, line int, text string, start, end int) location {
	return location{URI: uriOf(path), Range: rng{
		Start: position{line, units(text[:start])},
		End:   position{line, units(text[:end])},
	}}
}

func subtract(all, some []location) []location {
	var out []location
	for _, a := range all {
		keep := true
		for _, s := range some {
			if a == s {
				keep = false
			}
		}
		if keep {
			out = append(out, a)
		}
	}
	return out
}

func (f *fake) hover(ext, word string) any {
	decls := f.find(ext, word, true)
	if len(decls) == 0 {
		return nil
	}
	d := decls[0]
	ls := strings.Split(f.text(pathOf(d.URI)), "\n")
	decl := strings.TrimSuffix(strings.TrimSpace(ls[d.Range.Start.Line]), " {")
	var comment []string
	for i := d.Range.Start.Line - 1; i >= 0 && strings.HasPrefix(ls[i], "//"); i-- {
		comment = append([]string{strings.TrimSpace(strings.TrimPrefix(ls[i], "//"))}, comment...)
	}
	if strings.HasPrefix(word, "Legacy") {
		return map[string]any{"contents": []any{
			strings.Join(comment, " "),
			map[string]any{"language": "go", "value": decl},
		}}
	}
	value := "```go\n" + decl + "\n```"
	if len(comment) > 0 {
		value += "\n\n" + strings.Join(comment, " ")
	}
	return map[string]any{"contents": map[string]any{"kind": "markdown", "value": value}}
}

var (
	structRE = regexp.MustCompile(`^type ([A-Za-z_]\w*) struct \{`)
	typeRE   = regexp.MustCompile(`^type ([A-Za-z_]\w*) `)
	fieldRE  = regexp.MustCompile(`^\s+([A-Za-z_]\w*)\s+\S`)
	methodRE = regexp.MustCompile(`^func \(\w+ \*?([A-Za-z_]\w*)\) ([A-Za-z_]\w*)`)
	funcRE   = regexp.MustCompile(`^func ([A-Za-z_]\w*)`)
	varRE    = regexp.MustCompile(`^(var|const) ([A-Za-z_]\w*)`)
)

type symbol struct {
	Name           string    `json:"name"`
	Detail         string    `json:"detail,omitempty"`
	Kind           int       `json:"kind"`
	Range          rng       `json:"range"`
	SelectionRange rng       `json:"selectionRange"`
	Children       []*symbol `json:"children,omitempty"`
}

// symbols outlines a file: structs with their fields and methods,
// other types, functions, variables and constants.
func (f *fake) symbols(path string) any {
	ls := strings.Split(f.text(path), "\n")
	var top []*symbol
	types := map[string]*symbol{}
	sym := func(i int, line string, m []int, kind int) *symbol {
		s := span(path, i, line, m[0], m[1])
		return &symbol{Name: line[m[0]:m[1]], Kind: kind, SelectionRange: s.Range,
			Range: rng{position{i, 0}, position{i, units(line)}}}
	}
	for i := 0; i < len(ls); i++ {
		line := ls[i]
		switch {
		case structRE.MatchString(line):
			m := structRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 23)
			for i+1 < len(ls) && !strings.HasPrefix(ls[i+1], "}") {
				i++
				if fm := fieldRE.FindStringSubmatchIndex(ls[i]); fm != nil {
					field := sym(i, ls[i], fm[2:4], 8)
					field.Detail = strings.TrimSpace(ls[i][fm[3]:])
					s.Children = append(s.Children, field)
				}
			}
			types[s.Name] = s
			top = append(top, s)
		case typeRE.MatchString(line):
			m := typeRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 5)
			types[s.Name] = s
			top = append(top, s)
		case methodRE.MatchString(line):
			m := methodRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[4:6], 6)
			if t := types[line[m[2]:m[3]]]; t != nil {
				t.Children = append(t.Children, s)
			} else {
				top = append(top, s)
			}
		case funcRE.MatchString(line):
			m := funcRE.FindStringSubmatchIndex(line)
			s := sym(i, line, m[2:4], 12)
			s.Detail = strings.TrimSuffix(strings.TrimSpace(line[m[3]:]), " {")
			top = append(top, s)
		case varRE.MatchString(line):
			m := varRE.FindStringSubmatchIndex(line)
			kind := 13
			if line[m[2]:m[3]] == "const" {
				kind = 14
			}
			top = append(top, sym(i, line, m[4:6], kind))
		}
	}
	if !f.flat {
		if top == nil {
			return []any{}
		}
		return top
	}
	var flat []map[string]any
	var walk func(s *symbol, container string)
	walk = func(s *symbol, container string) {
		info := map[string]any{"name": s.Name, "kind": s.Kind,
			"location": location{URI: uriOf(path), Range: s.SelectionRange}}
		if container != "" {
			info["containerName"] = container
		}
		flat = append(flat, info)
		for _, c := range s.Children {
			walk(c, s.Name)
		}
	}
	for _, s := range top {
		walk(s, "")
	}
	return flat
}

func (f *fake) rename(ext, word, newName string) any {
	refs := f.find(ext, word, false)
	if len(refs) == 0 {
		return nil
	}
	byURI := map[string][]map[string]any{}
	var uris []string
	for _, r := range refs {
		if _, ok := byURI[r.URI]; !ok {
			uris = append(uris, r.URI)
		}
		byURI[r.URI] = append(byURI[r.URI], map[string]any{"range": r.Range, "newText": newName})
	}
	if f.changes {
		return map[string]any{"changes": byURI}
	}
	var dcs []any
	if newName == "MakeFile" {
		dcs = append(dcs, map[string]any{"kind": "create", "uri": uriOf(filepath.Join(f.root, "new.go"))})
	}
	for _, u := range uris {
		var version any
		f.mu.Lock()
		if d := f.docs[pathOf(u)]; d != nil {
			version = d.version
		}
		f.mu.Unlock()
		// The edits go last to first, as some servers send them, to check
		// that the client does not depend on their order.
		edits := byURI[u]
		for i, j := 0, len(edits)-1; i < j; i, j = i+1, j-1 {
			edits[i], edits[j] = edits[j], edits[i]
		}
		dcs = append(dcs, map[string]any{
			"textDocument": map[string]any{"uri": u, "version": version},
			"edits":        edits,
		})
	}
	return map[string]any{"documentChanges": dcs}
}

func pathOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return filepath.FromSlash(p.Path)
}

func uriOf(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
