package lsp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.lsp.dev/protocol"
)

func TestLanguage(t *testing.T) {
	for path, want := range map[string]string{
		"/x/main.go": "go", "/x/a.py": "python", "/x/a.ts": "typescript", "/x/a.tsx": "typescript",
		"/x/a.js": "typescript", "/x/a.jsx": "typescript", "/x/a.rs": "rust", "/x/a.c": "c", "/x/a.h": "c",
		"/x/a.cpp": "cpp", "/x/a.cc": "cpp", "/x/a.hpp": "cpp", "/x/A.java": "java", "/x/a.rb": "ruby",
		"/x/A.GO": "go", "/x/a.cs": "csharp", "/x/Makefile": "", "/x/a.txt": "", "/x/.go/README": "",
	} {
		if got := Language(path); got != want {
			t.Errorf("Language(%q) = %q, want %q", path, got, want)
		}
	}
	for path, want := range map[string]string{
		"a.ts": "typescript", "a.tsx": "typescriptreact", "a.js": "javascript", "a.jsx": "javascriptreact", "a.go": "go",
	} {
		if got := languageID(path); got != want {
			t.Errorf("languageID(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestUTF16Conversion(t *testing.T) {
	line := "aé😀b" // units: a 1, é 1, 😀 2, b 1
	for runes, units := range []uint32{0, 1, 2, 4, 5, 5} {
		if got := toUTF16(line, runes); got != units {
			t.Errorf("toUTF16(%d) = %d, want %d", runes, got, units)
		}
	}
	for units, runes := range []int{0, 1, 2, 2, 3, 4, 4} {
		// Unit 3 is inside the surrogate pair of 😀: it counts as 😀.
		if got := fromUTF16(line, uint32(units)); got != runes {
			t.Errorf("fromUTF16(%d) = %d, want %d", units, got, runes)
		}
	}
}

func TestLines(t *testing.T) {
	for text, want := range map[string][]string{
		"":            {""},
		"a":           {"a"},
		"a\n":         {"a"},
		"a\r\nb\r\n":  {"a", "b"},
		"a\n\nb":      {"a", "", "b"},
		"a\n\n":       {"a", ""},
		"é😀\nx\r\n\n": {"é😀", "x", ""},
	} {
		if got := lines(text); !reflect.DeepEqual(got, want) {
			t.Errorf("lines(%q) = %q, want %q", text, got, want)
		}
	}
}

func edit(l1, c1, l2, c2 uint32, text string) protocol.TextEdit {
	return protocol.TextEdit{Range: protocol.Range{
		Start: protocol.Position{Line: l1, Character: c1},
		End:   protocol.Position{Line: l2, Character: c2},
	}, NewText: text}
}

func TestApplyEdits(t *testing.T) {
	text := "héllo 😀 wörld\r\nsecond\n"
	got, err := applyEdits(text, []protocol.TextEdit{
		edit(1, 0, 1, 0, "B"),          // two inserts at one place keep their order…
		edit(0, 9, 0, 14, "there"),     // "wörld", after 😀 (two units)
		edit(0, 100, 0, 100, "!"),      // past the end of the line: before "\r\n"
		edit(9, 0, 9, 0, "EOF"),        // past the last line: at the end
		edit(0, 0, 0, 1, "H"),          // the first character
		edit(1, 0, 1, 0, "C"),          // …B then C
		edit(0, 6, 0, 8, "\U0001F600"), // 😀 by itself
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Héllo 😀 there!\r\nBCsecond\nEOF"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := applyEdits(text, []protocol.TextEdit{edit(0, 0, 0, 5, "x"), edit(0, 3, 0, 7, "y")}); err == nil {
		t.Error("overlapping edits were applied")
	}
	if _, err := applyEdits(text, []protocol.TextEdit{edit(0, 5, 0, 3, "x")}); err == nil {
		t.Error("an edit ending before its start was applied")
	}
}

func TestSplitCommand(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	for line, want := range map[string][]string{
		"gopls":                           {"gopls"},
		"  pyright-langserver   --stdio ": {"pyright-langserver", "--stdio"},
		"~/bin/server --root ~":           {filepath.Join(home, "bin/server"), "--root", home},
		"server ~user/x":                  {"server", "~user/x"},
	} {
		if got := splitCommand(line); !reflect.DeepEqual(got, want) {
			t.Errorf("splitCommand(%q) = %q, want %q", line, got, want)
		}
	}
}

func TestHoverText(t *testing.T) {
	for raw, want := range map[string]string{
		`{"kind":"markdown","value":"**x**"}`:                   "**x**",
		`{"kind":"plaintext","value":"x int"}`:                  "x int",
		`"just text"`:                                           "just text",
		`{"language":"go","value":"var x int"}`:                 "```go\nvar x int\n```",
		`["doc", {"language":"python","value":"def f(): ..."}]`: "doc\n\n```python\ndef f(): ...\n```",
		`[]`:   "",
		`null`: "",
		``:     "",
	} {
		if got := hoverText(json.RawMessage(raw)); got != want {
			t.Errorf("hoverText(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestDecodeLocations(t *testing.T) {
	loc := `{"uri":"file:///a.go","range":{"start":{"line":1,"character":2},"end":{"line":1,"character":5}}}`
	link := `{"targetUri":"file:///b.go","targetRange":{"start":{"line":0,"character":0},"end":{"line":9,"character":0}},"targetSelectionRange":{"start":{"line":3,"character":4},"end":{"line":3,"character":7}}}`
	for raw, want := range map[string][]string{
		`null`:                       nil,
		`[]`:                         nil,
		loc:                          {"file:///a.go 1 2"},
		"[" + loc + "]":              {"file:///a.go 1 2"},
		"[" + link + "]":             {"file:///b.go 3 4"},
		"[" + loc + "," + link + "]": {"file:///a.go 1 2", "file:///b.go 3 4"},
	} {
		locs, err := decodeLocations(json.RawMessage(raw))
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		var got []string
		for _, l := range locs {
			got = append(got, string(l.URI)+" "+itoa(l.Range.Start.Line)+" "+itoa(l.Range.Start.Character))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %q, want %q", raw, got, want)
		}
	}
}

func itoa(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestWordAt(t *testing.T) {
	line := `	x := fooBar(é1) + 😀`
	for col, want := range map[int]string{
		0:  "",       // the tab
		1:  "x",      // on x
		2:  "x",      // right after x
		3:  "",       // ":" after a space
		6:  "fooBar", // its first letter
		12: "fooBar", // "(" right after it
		13: "é1",
		17: "",
		19: "", // 😀
		20: "", // past the end
	} {
		if got := wordAt(line, col); got != want {
			t.Errorf("wordAt(%d) = %q, want %q", col, got, want)
		}
	}
}

func TestFilePath(t *testing.T) {
	for u, want := range map[protocol.DocumentURI]string{
		"file:///tmp/a%20b/x.go": "/tmp/a b/x.go",
		"file:///tmp/x.go":       "/tmp/x.go",
		"jdt://contents/x.class": "",
		"untitled:Untitled-1":    "",
		"::not a uri":            "",
	} {
		got, ok := filePath(u)
		if got != want || ok != (want != "") {
			t.Errorf("filePath(%q) = %q, %v; want %q", u, got, ok, want)
		}
	}
}
