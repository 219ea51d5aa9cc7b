package skills

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// past is the mtime tests give their files, far enough back that the cache
// trusts it (see racyWindow); edits move mtimes forward from it, so no test
// depends on the clock's or the filesystem's timestamp granularity.
var past = time.Now().Add(-time.Hour).Truncate(time.Second)

// skillMD is the content of a well-formed SKILL.md.
func skillMD(name, desc string) string {
	return fmt.Sprintf("---\nname: %s\ndescription: %s\n---\nDo the %s thing.\n", name, desc, name)
}

// write creates path (and its parents) with content.
func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// addSkill writes dir/folder/SKILL.md and returns its path.
func addSkill(t *testing.T, dir, folder, content string) string {
	t.Helper()
	p := filepath.Join(dir, folder, "SKILL.md")
	write(t, p, content)
	return p
}

// settle sets the mtime of root and everything under it to at.
func settle(t *testing.T, root string, at time.Time) {
	t.Helper()
	var paths []string
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Children first: touching a child does not change its parent's mtime,
	// but do it in this order anyway so the parents end up exactly at.
	for _, p := range slices.Backward(paths) {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// touch sets one path's mtime.
func touch(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

// findWarning returns the warnings containing all of parts.
func findWarning(s *Set, parts ...string) []string {
	var out []string
	for _, w := range s.Warnings {
		ok := true
		for _, p := range parts {
			if !strings.Contains(w, p) {
				ok = false
			}
		}
		if ok {
			out = append(out, w)
		}
	}
	return out
}

func TestLoadTwoDirs(t *testing.T) {
	root := t.TempDir()
	user, proj := filepath.Join(root, "user"), filepath.Join(root, "proj")
	addSkill(t, user, "zeta", skillMD("zeta", "Last of all."))
	addSkill(t, user, "alpha", skillMD("alpha", "First of all."))
	addSkill(t, proj, "mid", skillMD("mid", "In the middle."))
	addSkill(t, proj, "Beta", skillMD("Beta", "Capitalised."))
	write(t, filepath.Join(proj, "README.md"), "not a skill")
	if err := os.MkdirAll(filepath.Join(proj, "shared-scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	settle(t, root, past)

	s := Load([]string{user, proj})
	if len(s.Warnings) != 0 {
		t.Fatalf("warnings: %q", s.Warnings)
	}
	want := []Skill{
		{"Beta", "Capitalised.", filepath.Join(proj, "Beta"), filepath.Join(proj, "Beta", "SKILL.md")},
		{"alpha", "First of all.", filepath.Join(user, "alpha"), filepath.Join(user, "alpha", "SKILL.md")},
		{"mid", "In the middle.", filepath.Join(proj, "mid"), filepath.Join(proj, "mid", "SKILL.md")},
		{"zeta", "Last of all.", filepath.Join(user, "zeta"), filepath.Join(user, "zeta", "SKILL.md")},
	}
	if !slices.Equal(s.Skills, want) {
		t.Fatalf("skills:\n got %+v\nwant %+v", s.Skills, want)
	}
	if got := s.Names(); !slices.Equal(got, []string{"Beta", "alpha", "mid", "zeta"}) {
		t.Fatalf("Names = %q", got)
	}
	if k, ok := s.Get("mid"); !ok || k.Description != "In the middle." {
		t.Fatalf("Get(mid) = %+v, %v", k, ok)
	}
	// Names match case-sensitively.
	if _, ok := s.Get("beta"); ok {
		t.Fatal("Get(beta) found Beta")
	}
	if _, ok := s.Get("nope"); ok {
		t.Fatal("Get(nope) found something")
	}
}

func TestLaterDirOverrides(t *testing.T) {
	root := t.TempDir()
	user, proj := filepath.Join(root, "user"), filepath.Join(root, "proj")
	up := addSkill(t, user, "deploy", skillMD("deploy", "The user's way."))
	pp := addSkill(t, proj, "deploy", skillMD("deploy", "The project's way."))
	addSkill(t, user, "other", skillMD("other", "Untouched."))
	settle(t, root, past)

	s := Load([]string{user, proj})
	k, ok := s.Get("deploy")
	if !ok || k.Description != "The project's way." || k.Path != pp {
		t.Fatalf("deploy = %+v, %v", k, ok)
	}
	if len(s.Skills) != 2 {
		t.Fatalf("skills: %+v", s.Skills)
	}
	if w := findWarning(s, `"deploy"`, up, pp, "overrides"); len(w) != 1 || len(s.Warnings) != 1 {
		t.Fatalf("warnings: %q", s.Warnings)
	}

	// In the other order the user's skill wins.
	s = Load([]string{proj, user})
	if k, _ := s.Get("deploy"); k.Path != up {
		t.Fatalf("reversed: deploy = %+v", k)
	}
}

func TestSameDirListedTwice(t *testing.T) {
	dir := t.TempDir()
	addSkill(t, dir, "one", skillMD("one", "Once."))
	settle(t, dir, past)
	s := Load([]string{dir, dir + "/", dir})
	if len(s.Skills) != 1 || len(s.Warnings) != 0 {
		t.Fatalf("set: %+v", s)
	}
}

func TestReservedNamesShadowed(t *testing.T) {
	dir := t.TempDir()
	np := addSkill(t, dir, "new", skillMD("new", "Would hide /new."))
	cp := addSkill(t, dir, "compact", skillMD("compact", "Would hide /compact."))
	addSkill(t, dir, "newer", skillMD("newer", "Fine."))
	settle(t, dir, past)

	s := Load([]string{dir})
	if got := s.Names(); !slices.Equal(got, []string{"newer"}) {
		t.Fatalf("Names = %q", got)
	}
	want := []string{
		fmt.Sprintf("skill \"compact\" in %s is shadowed by the /compact command; rename it", cp),
		fmt.Sprintf("skill \"new\" in %s is shadowed by the /new command; rename it", np),
	}
	if !slices.Equal(s.Warnings, want) {
		t.Fatalf("warnings:\n got %q\nwant %q", s.Warnings, want)
	}
}

func TestBrokenFilesSkipped(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		folder, content, problem string
	}{
		{"nofront", "# Just Markdown\nname: x\n", "no front matter"},
		{"empty", "", "no front matter"},
		{"unclosed", "---\nname: unclosed\ndescription: d\n", "not closed"},
		{"badyaml", "---\nname: [oops\ndescription: d\n---\nbody\n", "invalid YAML"},
		{"notmapping", "---\n- a\n- b\n---\nbody\n", `line 2: expected keys such as "name:"`},
		{"scalar", "---\njust text\n---\nbody\n", `line 2: expected keys such as "name:"`},
		{"emptyfront", "---\n---\nbody\n", `no "name"`},
		{"dupkey", "---\nname: dupkey\nname: dupkey\ndescription: d\n---\n", `"name" already defined`},
		{"noname", "---\ndescription: d\n---\nbody\n", `no "name"`},
		{"emptyname", "---\nname: \"\"\ndescription: d\n---\n", `no "name"`},
		{"nullname", "---\nname:\ndescription: d\n---\n", `no "name"`},
		{"nodesc", "---\nname: nodesc\n---\n", `no "description"`},
		{"emptydesc", "---\nname: emptydesc\ndescription: \"  \"\n---\n", `no "description"`},
		{"intname", "---\nname: 123\ndescription: d\n---\n", "line 2: must be a string, not int"},
		{"listdesc", "---\nname: listdesc\ndescription:\n  - a\n---\n", "must be a string, not a list"},
		{"booldesc", "---\nname: booldesc\ndescription: true\n---\n", "must be a string, not bool"},
		{"badname", "---\nname: has space\ndescription: d\n---\n", `invalid name "has space"`},
	}
	for _, c := range cases {
		addSkill(t, dir, c.folder, c.content)
	}
	// A SKILL.md that is a directory cannot be read.
	if err := os.MkdirAll(filepath.Join(dir, "isdir", "SKILL.md"), 0o755); err != nil {
		t.Fatal(err)
	}
	addSkill(t, dir, "good", skillMD("good", "Still loads."))
	// Other keys are ignored; quoted and multi-line strings are strings.
	addSkill(t, dir, "extra", "---\nname: \"extra\"\ndescription: >\n  Folded\n  text.\nlicense: MIT\nallowed-tools: [bash]\nversion: 3\n---\nbody\n")
	settle(t, dir, past)

	s := Load([]string{dir})
	if got := s.Names(); !slices.Equal(got, []string{"extra", "good"}) {
		t.Fatalf("Names = %q (warnings %q)", got, s.Warnings)
	}
	if k, _ := s.Get("extra"); k.Description != "Folded text." {
		t.Fatalf("extra description = %q", k.Description)
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.folder, "SKILL.md")
		if w := findWarning(s, p+" skipped", c.problem); len(w) != 1 {
			t.Errorf("%s: no warning naming the file and %q in %q", c.folder, c.problem, s.Warnings)
		}
	}
	if w := findWarning(s, filepath.Join(dir, "isdir", "SKILL.md")+" skipped", "cannot read"); len(w) != 1 {
		t.Errorf("isdir: warnings %q", s.Warnings)
	}
	if len(s.Warnings) != len(cases)+1 {
		t.Errorf("%d warnings, want %d: %q", len(s.Warnings), len(cases)+1, s.Warnings)
	}
	for _, w := range s.Warnings {
		if strings.ContainsAny(w, "\r\n") {
			t.Errorf("warning spans lines: %q", w)
		}
	}
}

func TestUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	dir := t.TempDir()
	p := addSkill(t, dir, "secret", skillMD("secret", "Hidden."))
	addSkill(t, dir, "open", skillMD("open", "Visible."))
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	settle(t, dir, past)
	s := Load([]string{dir})
	if got := s.Names(); !slices.Equal(got, []string{"open"}) {
		t.Fatalf("Names = %q", got)
	}
	if w := findWarning(s, p, "cannot read"); len(w) != 1 {
		t.Fatalf("warnings: %q", s.Warnings)
	}
}

func TestNameDiffersFromFolder(t *testing.T) {
	dir := t.TempDir()
	p := addSkill(t, dir, "folder-name", skillMD("real-name", "Named in the file."))
	settle(t, dir, past)
	s := Load([]string{dir})
	k, ok := s.Get("real-name")
	if !ok || k.Dir != filepath.Join(dir, "folder-name") || k.Path != p {
		t.Fatalf("real-name = %+v, %v", k, ok)
	}
	if _, ok := s.Get("folder-name"); ok {
		t.Fatal("loaded under the folder's name")
	}
	if w := findWarning(s, `"real-name"`, p, `"folder-name"`); len(w) != 1 || len(s.Warnings) != 1 {
		t.Fatalf("warnings: %q", s.Warnings)
	}
}

func TestDuplicateNameInOneDir(t *testing.T) {
	dir := t.TempDir()
	addSkill(t, dir, "a-copy", skillMD("tidy", "The copy."))
	p := addSkill(t, dir, "tidy", skillMD("tidy", "The original."))
	settle(t, dir, past)
	s := Load([]string{dir})
	if k, _ := s.Get("tidy"); k.Path != p || len(s.Skills) != 1 {
		t.Fatalf("skills: %+v", s.Skills)
	}
	if w := findWarning(s, filepath.Join(dir, "a-copy", "SKILL.md"), "is ignored", p); len(w) != 1 {
		t.Fatalf("warnings: %q", s.Warnings)
	}
}

func TestNames(t *testing.T) {
	dir := t.TempDir()
	valid := []string{"a", "A.b-c_D9", "x.y", "--", "v1.2"}
	invalid := []string{"has space", "a/b", `"a\\b"`, "héllo", "$x", "/slash", "semi;colon", "tab\\there"}
	for i, n := range valid {
		addSkill(t, dir, fmt.Sprintf("v%d", i), skillMD(n, "ok"))
	}
	for i, n := range invalid {
		addSkill(t, dir, fmt.Sprintf("i%d", i), skillMD(n, "bad"))
	}
	settle(t, dir, past)
	s := Load([]string{dir})
	got := s.Names()
	want := slices.Sorted(slices.Values(valid))
	if !slices.Equal(got, want) {
		t.Fatalf("Names = %q, want %q", got, want)
	}
	if n := len(findWarning(s, "invalid name")); n != len(invalid) {
		t.Fatalf("%d invalid-name warnings, want %d: %q", n, len(invalid), s.Warnings)
	}
}

func TestMissingDir(t *testing.T) {
	root := t.TempDir()
	s := Load([]string{filepath.Join(root, "nope"), filepath.Join(root, "nor", "this")})
	if len(s.Skills) != 0 || len(s.Warnings) != 0 {
		t.Fatalf("set: %+v", s)
	}
	if s := Load(nil); len(s.Skills) != 0 || len(s.Warnings) != 0 {
		t.Fatalf("Load(nil): %+v", s)
	}
	// A file where a directory should be is a mistake worth a warning.
	f := filepath.Join(root, "file")
	write(t, f, "x")
	if s := Load([]string{f}); len(s.Skills) != 0 || len(findWarning(s, f, "not a directory")) != 1 {
		t.Fatalf("file as dir: %+v", s)
	}
}

func TestBody(t *testing.T) {
	dir := t.TempDir()
	addSkill(t, dir, "lf", "---\nname: lf\ndescription: d\n---\n\n  \nStep one.\n\n  Step two.\n")
	addSkill(t, dir, "crlf", "\xEF\xBB\xBF---\r\nname: crlf\r\ndescription: d\r\n---\r\n\r\nStep one.\r\nStep two.\r\n")
	addSkill(t, dir, "bare", "---\nname: bare\ndescription: d\n---")
	addSkill(t, dir, "dashes", "---\nname: dashes\ndescription: d\n---\nText\n---\nMore\n")
	settle(t, dir, past)
	s := Load([]string{dir})
	if len(s.Warnings) != 0 {
		t.Fatalf("warnings: %q", s.Warnings)
	}
	want := map[string]string{
		"lf":     "Step one.\n\n  Step two.\n",
		"crlf":   "Step one.\nStep two.\n",
		"bare":   "",
		"dashes": "Text\n---\nMore\n",
	}
	for name, w := range want {
		k, ok := s.Get(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		got, err := k.Body()
		if err != nil || got != w {
			t.Errorf("%s: Body = %q, %v; want %q", name, got, err, w)
		}
	}

	// Body reads the file now, not what was loaded.
	k, _ := s.Get("lf")
	write(t, k.Path, "---\nname: lf\ndescription: d\n---\nChanged.\n")
	if got, err := k.Body(); err != nil || got != "Changed.\n" {
		t.Fatalf("after edit: Body = %q, %v", got, err)
	}
	write(t, k.Path, "no front matter any more")
	if _, err := k.Body(); err == nil || !strings.Contains(err.Error(), k.Path) {
		t.Fatalf("broken file: err = %v", err)
	}
	if err := os.Remove(k.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Body(); err == nil {
		t.Fatal("removed file: no error")
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	addSkill(t, dir, "tool", skillMD("tool", "Has files."))
	sd := filepath.Join(dir, "tool")
	for _, f := range []string{"run.sh", "a-b.txt", "a/c.txt", "templates/x/deep.md", "templates/SKILL.md", ".git/HEAD"} {
		write(t, filepath.Join(sd, f), f)
	}
	if err := os.MkdirAll(filepath.Join(sd, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	settle(t, dir, past)
	k, ok := Load([]string{dir}).Get("tool")
	if !ok {
		t.Fatal("tool missing")
	}
	got, err := k.Files()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range []string{"a-b.txt", "a/c.txt", "run.sh", "templates/SKILL.md", "templates/x/deep.md"} {
		want = append(want, filepath.Join(sd, f))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Files:\n got %q\nwant %q", got, want)
	}

	// No other file: an empty list.
	addSkill(t, dir, "lonely", skillMD("lonely", "Alone."))
	k2 := Skill{Name: "lonely", Dir: filepath.Join(dir, "lonely"), Path: filepath.Join(dir, "lonely", "SKILL.md")}
	if got, err := k2.Files(); err != nil || len(got) != 0 {
		t.Fatalf("lonely: %q, %v", got, err)
	}

	// A missing folder is an error.
	if _, err := (Skill{Dir: filepath.Join(dir, "gone")}).Files(); err == nil {
		t.Fatal("missing folder: no error")
	}
}

func TestFilesCap(t *testing.T) {
	for _, c := range []struct {
		n    int
		last string
	}{
		{200, ""},
		{201, "… and 1 more file"},
		{237, "… and 37 more files"},
	} {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			dir := t.TempDir()
			p := addSkill(t, dir, "many", skillMD("many", "Lots."))
			sd := filepath.Dir(p)
			var all []string
			for i := range c.n {
				f := filepath.Join(sd, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%03d.txt", i))
				write(t, f, "x")
				all = append(all, f)
			}
			slices.Sort(all)
			got, err := Skill{Name: "many", Dir: sd, Path: p}.Files()
			if err != nil {
				t.Fatal(err)
			}
			if c.last == "" {
				if !slices.Equal(got, all) {
					t.Fatalf("got %d files, want all %d", len(got), len(all))
				}
				return
			}
			if len(got) != 201 || !slices.Equal(got[:200], all[:200]) || got[200] != c.last {
				t.Fatalf("got %d entries, last %q; want 201, last %q", len(got), got[len(got)-1], c.last)
			}
		})
	}
}

func TestCache(t *testing.T) {
	root := t.TempDir()
	user, proj := filepath.Join(root, "user"), filepath.Join(root, "proj")
	addSkill(t, user, "one", skillMD("one", "First."))
	p2 := addSkill(t, proj, "two", skillMD("two", "Second."))
	if err := os.MkdirAll(filepath.Join(proj, "later"), 0o755); err != nil {
		t.Fatal(err)
	}
	settle(t, root, past)
	dirs := []string{user, proj}

	s1 := Load(dirs)
	n := parses.Load()
	s2 := Load(dirs)
	if s1 != s2 {
		t.Fatal("unchanged: Load returned a new Set")
	}
	if d := parses.Load() - n; d != 0 {
		t.Fatalf("unchanged: %d files parsed again", d)
	}
	// Another list holding the same directories shares their parsing.
	if s := Load([]string{proj}); len(s.Skills) != 1 || parses.Load() != n {
		t.Fatalf("sub-list: %+v, parsed %d", s, parses.Load()-n)
	}

	// Editing a SKILL.md is seen, and only that file is parsed again.
	write(t, p2, skillMD("two", "Second, edited."))
	touch(t, p2, past.Add(time.Minute))
	s3 := Load(dirs)
	if k, _ := s3.Get("two"); k.Description != "Second, edited." {
		t.Fatalf("edit not seen: %+v", k)
	}
	if d := parses.Load() - n; d != 1 {
		t.Fatalf("edit: %d files parsed, want 1", d)
	}
	if s3 == s2 || s3.Same(s2) {
		t.Fatal("edit: the Set did not change")
	}
	if s4 := Load(dirs); s4 != s3 {
		t.Fatal("after edit: Load returned a new Set")
	}

	// Same size, later mtime: still seen.
	write(t, p2, skillMD("two", "Second, EDITED."))
	touch(t, p2, past.Add(2*time.Minute))
	if k, _ := Load(dirs).Get("two"); k.Description != "Second, EDITED." {
		t.Fatalf("same-size edit not seen: %+v", k)
	}

	// Adding a skill folder changes the directory's mtime.
	p3 := addSkill(t, user, "three", skillMD("three", "Third."))
	settle(t, filepath.Join(user, "three"), past.Add(time.Minute))
	touch(t, user, past.Add(time.Minute))
	n = parses.Load()
	s5 := Load(dirs)
	if got := s5.Names(); !slices.Equal(got, []string{"one", "three", "two"}) {
		t.Fatalf("add: Names = %q", got)
	}
	if d := parses.Load() - n; d != 1 {
		t.Fatalf("add: %d files parsed, want 1", d)
	}

	// Writing a SKILL.md into an existing folder does not change the
	// directory's mtime, yet is seen.
	p4 := addSkill(t, proj, "later", skillMD("later", "Came later."))
	touch(t, p4, past.Add(time.Minute))
	touch(t, filepath.Dir(p4), past.Add(time.Minute))
	touch(t, proj, past)
	if _, ok := Load(dirs).Get("later"); !ok {
		t.Fatal("SKILL.md added to an existing folder not seen")
	}

	// Removing a skill folder.
	if err := os.RemoveAll(filepath.Dir(p3)); err != nil {
		t.Fatal(err)
	}
	touch(t, user, past.Add(2*time.Minute))
	if got := Load(dirs).Names(); !slices.Equal(got, []string{"later", "one", "two"}) {
		t.Fatalf("remove: Names = %q", got)
	}

	// Removing only the SKILL.md.
	if err := os.Remove(p4); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Dir(p4), past.Add(2*time.Minute))
	if got := Load(dirs).Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("remove SKILL.md: Names = %q", got)
	}

	// A directory that appears, then disappears.
	extra := filepath.Join(root, "extra")
	dirs3 := []string{user, proj, extra}
	if got := Load(dirs3).Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("missing extra: Names = %q", got)
	}
	addSkill(t, extra, "four", skillMD("four", "Fourth."))
	settle(t, extra, past)
	if got := Load(dirs3).Names(); !slices.Equal(got, []string{"four", "one", "two"}) {
		t.Fatalf("extra appeared: Names = %q", got)
	}
	if err := os.RemoveAll(extra); err != nil {
		t.Fatal(err)
	}
	if got := Load(dirs3).Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("extra removed: Names = %q", got)
	}

	// A broken file is not parsed again until it changes, and its warning
	// stays.
	pb := addSkill(t, proj, "broken", "no front matter")
	settle(t, filepath.Dir(pb), past)
	touch(t, proj, past.Add(3*time.Minute))
	s6 := Load(dirs)
	if len(findWarning(s6, pb)) != 1 {
		t.Fatalf("broken: warnings %q", s6.Warnings)
	}
	n = parses.Load()
	if s7 := Load(dirs); s7 != s6 || parses.Load() != n {
		t.Fatal("broken: parsed again without a change")
	}
}

// TestCacheFreshFile checks that a file written moments ago is not trusted:
// an edit that keeps its size and lands within the same timestamp tick is
// still seen.
func TestCacheFreshFile(t *testing.T) {
	dir := t.TempDir()
	p := addSkill(t, dir, "fresh", skillMD("fresh", "Version A."))
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	s1 := Load([]string{dir})
	if k, _ := s1.Get("fresh"); k.Description != "Version A." {
		t.Fatalf("first: %+v", k)
	}
	// A reload without change may read the file again, but must hand out
	// the same Set.
	if s2 := Load([]string{dir}); s2 != s1 {
		t.Fatal("fresh file unchanged: Load returned a new Set")
	}
	write(t, p, skillMD("fresh", "Version B."))
	touch(t, p, fi.ModTime())
	if k, _ := Load([]string{dir}).Get("fresh"); k.Description != "Version B." {
		t.Fatalf("same-tick edit not seen: %+v", k)
	}
}

func TestSame(t *testing.T) {
	a := &Set{Skills: []Skill{{"a", "A.", "/s/a", "/s/a/SKILL.md"}, {"b", "B.", "/s/b", "/s/b/SKILL.md"}}}
	b := &Set{Skills: slices.Clone(a.Skills), Warnings: []string{"some warning"}}
	if !a.Same(b) || !b.Same(a) || !a.Same(a) {
		t.Fatal("equal skills, different warnings: not Same")
	}
	c := &Set{Skills: slices.Clone(a.Skills)}
	c.Skills[1].Description = "B, changed."
	d := &Set{Skills: slices.Clone(a.Skills)}
	d.Skills[1].Path = "/t/b/SKILL.md"
	e := &Set{Skills: a.Skills[:1]}
	f := &Set{Skills: slices.Clone(a.Skills)}
	f.Skills[0].Name = "z"
	for i, o := range []*Set{c, d, e, f} {
		if a.Same(o) || o.Same(a) {
			t.Errorf("case %d: Same despite a difference", i)
		}
	}
	var nilSet *Set
	if !nilSet.Same(&Set{}) || !(&Set{}).Same(nil) || !nilSet.Same(nil) {
		t.Fatal("nil and empty sets differ")
	}
	if nilSet.Same(a) || a.Same(nil) {
		t.Fatal("nil Same as a non-empty set")
	}
	if _, ok := nilSet.Get("a"); ok || nilSet.Names() != nil {
		t.Fatal("nil Set not empty")
	}
}

func TestDirs(t *testing.T) {
	home, cwd := "/home/u", "/work/proj"
	got := Dirs([]string{"~/.config/mm/skills", ".mm/skills", "~", "/opt/skills/", "../shared", "", "  ", "~other/x"}, cwd, home)
	want := []string{
		"/home/u/.config/mm/skills",
		"/work/proj/.mm/skills",
		"/home/u",
		"/opt/skills",
		"/work/shared",
		"/work/proj/~other/x",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Dirs:\n got %q\nwant %q", got, want)
	}
	// Without a home or a cwd, what cannot be made absolute is dropped.
	if got := Dirs([]string{"~/x", "~", "rel", "/abs"}, "", ""); !slices.Equal(got, []string{"/abs"}) {
		t.Fatalf("Dirs without home and cwd = %q", got)
	}
}

func TestConcurrentLoad(t *testing.T) {
	root := t.TempDir()
	user, proj := filepath.Join(root, "user"), filepath.Join(root, "proj")
	for i := range 5 {
		addSkill(t, user, fmt.Sprintf("u%d", i), skillMD(fmt.Sprintf("u%d", i), "User."))
		addSkill(t, proj, fmt.Sprintf("p%d", i), skillMD(fmt.Sprintf("p%d", i), "Project."))
	}
	p := addSkill(t, proj, "edited", skillMD("edited", "v0"))
	settle(t, root, past)
	dirs := []string{user, proj}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	// One writer edits a skill while the readers load, so that the cache is
	// updated under contention.
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(p, []byte(skillMD("edited", fmt.Sprintf("v%d", i))), 0o644); err != nil {
				t.Error(err)
				return
			}
			_ = os.Chtimes(p, past.Add(time.Duration(i)*time.Second), past.Add(time.Duration(i)*time.Second))
		}
	})
	var readers sync.WaitGroup
	for g := range 8 {
		readers.Go(func() {
			for range 100 {
				list := dirs
				if g%2 == 1 {
					list = []string{proj}
				}
				s := Load(list)
				if _, ok := s.Get("p0"); !ok {
					t.Errorf("goroutine %d: p0 missing from %q", g, s.Names())
					return
				}
				if g%2 == 0 && len(s.Skills) != 11 && len(findWarning(s, p)) == 0 {
					// A half-written file may be broken for a moment, and
					// then warned about; otherwise all 11 skills are there.
					t.Errorf("goroutine %d: %d skills: %q", g, len(s.Skills), s.Names())
					return
				}
				_ = s.Same(Load(dirs))
			}
		})
	}
	readers.Wait()
	close(stop)
	wg.Wait()

	final := skillMD("edited", "final")
	write(t, p, final)
	touch(t, p, past.Add(24*time.Hour))
	if k, _ := Load(dirs).Get("edited"); k.Description != "final" {
		t.Fatalf("after the storm: %+v", k)
	}
}
