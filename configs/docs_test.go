package configs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The tests in this file keep the documentation honest: the README and the
// files in docs/ name keys, paths and sections that must exist.

// configDoc is where the table of every config key lives.
const configDoc = "../docs/configuration.md"

// TestConfigDocListsEveryKey checks docs/configuration.md's table against
// default.yaml: a row for every key, and no row for a key that is gone.
func TestConfigDocListsEveryKey(t *testing.T) {
	doc, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = true
	}
	keys := map[string]bool{}
	for _, k := range leafKeys(t, defaultYAML) {
		keys[k.name] = true
		if !rows[k.name] {
			t.Errorf("docs/configuration.md has no row for `%s`", k.name)
		}
	}
	for r := range rows {
		if !keys[r] {
			t.Errorf("docs/configuration.md has a row for `%s`, which default.yaml does not have", r)
		}
	}
}

// docFiles are the README and every docs/*.md, as paths from this package.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, files...)
}

// TestDocPathsExist: every repository path that the README or a file in
// docs/ names in backticks exists (the seed documents included), and every
// relative link leads to a file, and to a heading when it names one, so
// that a reader who follows one finds it.
func TestDocPathsExist(t *testing.T) {
	roots, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	isRoot := map[string]bool{}
	for _, e := range roots {
		isRoot[e.Name()] = true
	}
	backticked := regexp.MustCompile("`([A-Za-z0-9_.-]+/[^`\\s]*)`")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	paths, links := 0, 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../")
		// Paths in backticks are written from the repository's root.
		for _, m := range backticked.FindAllStringSubmatch(string(text), -1) {
			p := m[1]
			first, _, _ := strings.Cut(p, "/")
			if first == "shared" { // the seeds' folder outside the repository
				t.Errorf("%s names `%s`, outside the repository (the seeds are in docs/seeds)", name, p)
				continue
			}
			// .git is git's, not the repository's (in a worktree it is
			// a file).
			if !isRoot[first] || first == ".git" || strings.ContainsAny(p, "<>*…{}$") {
				continue
			}
			paths++
			if _, err := os.Stat(filepath.Join("..", strings.TrimSuffix(p, ":"))); err != nil {
				t.Errorf("%s names `%s`, which is not in the repository", name, p)
			}
		}
		// Links are relative to the file that holds them.
		for _, m := range link.FindAllStringSubmatch(proseOf(string(text)), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, ":") {
				continue // a URL
			}
			links++
			dest := file
			if target != "" {
				dest = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s links to %s, which is not in the repository", name, m[1])
					continue
				}
			}
			if anchor == "" {
				continue
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s links to %s: %v", name, m[1], err)
				continue
			}
			if !headingAnchors(string(body))[anchor] {
				t.Errorf("%s links to %s, which has no heading #%s", name, m[1], anchor)
			}
		}
	}
	if paths < 40 || links < 30 {
		t.Errorf("only %d paths and %d links checked: the patterns no longer find the documents' paths", paths, links)
	}
}

// proseOf returns text without its fenced code blocks.
func proseOf(text string) string {
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens, and -1,
// -2… after a repeated one.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(proseOf(text), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
