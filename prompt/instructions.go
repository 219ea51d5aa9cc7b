package prompt

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Project instructions are the files people write for agents (AGENTS.md,
// CLAUDE.md): in each folder from the git root down to the session's cwd
// the first name present, joined root first into the system prompt, with
// the user's own file from mm's config folder before them; and a
// subfolder's, shown once in a tool result when the model first works on a
// file there. The agents.md convention gives their scope: a file applies to
// its folder and everything below, the deeper file wins, and the user's
// words in the conversation win over every file.

// File is one instruction file as it was read.
type File struct {
	// Path is the file, absolute; Dir the folder it applies to.
	Path, Dir string
	// Global marks the user's own file (mm's config folder), which applies
	// to every project.
	Global bool
	// Text is what was read of it, at most its budget; Cut counts the bytes
	// left out, and Skipped says none could be read (the budget was spent).
	Text    string
	Cut     int64
	Skipped bool
	// Stamp is the file's size and time when read; budget the bytes it
	// could take then. A file read again with both the same is not read.
	Stamp  Stamp
	budget int
}

// Stamp is what says a file changed: its size and modification time.
type Stamp struct {
	Size int64
	Mod  time.Time
}

// Finder finds instruction files.
type Finder struct {
	// Names are the file names looked for in a folder, the first present
	// taken (instructions.files).
	Names []string
	// MaxBytes bounds the files of the system prompt together, and each
	// subfolder's file (instructions.maxBytes, smaller for a small
	// window); 0 reads none.
	MaxBytes int
	// Global is the folder of the user's own file (~/.config/mm); "" none.
	Global string
	// Allow says whether a project file may be read (mm serve: inside the
	// tenant's roots, not hidden from the session); nil allows all. The
	// user's own file is mm's configuration, not the project's, and is
	// not asked about.
	Allow func(path string) bool
}

// Root is the folder instructions are looked for from: the git root
// above cwd (the first folder with a .git, a folder or a file), else cwd;
// git says whether it is a git root (false: none was found).
func Root(cwd string) (root string, git bool) {
	for dir := cwd; ; {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return cwd, false
		}
		dir = parent
	}
}

// chain is the folders from root down to cwd, root first.
func chain(root, cwd string) []string {
	var out []string
	for dir := cwd; ; dir = filepath.Dir(dir) {
		out = append(out, dir)
		if dir == root || filepath.Dir(dir) == dir {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Folders are the folders Discover looks in for a session in cwd whose
// instructions are looked for from root: the user's own folder, then
// root down to cwd. A Watch on them says when to look again.
func (f Finder) Folders(root, cwd string) []string {
	var out []string
	if f.Global != "" {
		out = append(out, f.Global)
	}
	return append(out, chain(root, cwd)...)
}

// linked are the folders of the files that those of files that are links
// lead to, when elsewhere.
func linked(files []File) []string {
	var out []string
	for _, file := range files {
		if fi, err := os.Lstat(file.Path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if target, err := filepath.EvalSymlinks(file.Path); err == nil && filepath.Dir(target) != filepath.Dir(file.Path) {
			out = append(out, filepath.Dir(target))
		}
	}
	return out
}

// Watched is DiscoverAgain under w: the folders are watched for key
// before they are read, so that a change made while they are read is
// seen at the next look; an instruction file that is a link has the
// folder of its file watched too (and is read again once it is). watched
// says whether w holds them all (Watch.Same may then be asked).
func (f Finder) Watched(w *Watch, key, root, cwd string, prev []File, empty []Empty) (files []File, nowEmpty []Empty, watched bool) {
	dirs := f.Folders(root, cwd)
	watched = w.Look(key, dirs)
	files, nowEmpty = f.DiscoverAgain(root, cwd, prev, empty)
	if more := linked(files); watched && len(more) > 0 {
		watched = w.Look(key, append(dirs, more...))
		files, nowEmpty = f.DiscoverAgain(root, cwd, files, nowEmpty)
	}
	return files, nowEmpty, watched
}

// Discover reads the instructions of a session in cwd whose instructions
// are looked for from root (Root): the user's own file, then one file per
// folder from root down to cwd, within MaxBytes together. A file of prev
// whose stamp and budget have not changed is kept as it was, not read.
func (f Finder) Discover(root, cwd string, prev []File) []File {
	files, _ := f.DiscoverAgain(root, cwd, prev, nil)
	return files
}

// Empty is a folder in which Discover found no instruction file: its own
// stamp, and when it was looked at.
type Empty struct {
	Dir    string
	Stamp  Stamp
	Looked time.Time
}

// settled is how much older than the look a folder's time must be for
// its stamp to say that nothing was added since: a folder's time is the
// kernel's coarse clock (a few ms), so a file made in the same tick as
// the look would leave the folder's time as the look saw it. The margin
// is ten ticks or more, and covers a network mount's clock a little
// behind this machine's.
const settled = 100 * time.Millisecond

// DiscoverAgain is Discover for a session that looked before: a folder of
// empty (the previous look's) whose stamp is the same, and settled, holds
// no instruction file still (adding or renaming one changes its folder's
// time), and costs one stat instead of one per name. It returns the
// folders found empty this time.
func (f Finder) DiscoverAgain(root, cwd string, prev []File, empty []Empty) ([]File, []Empty) {
	if f.MaxBytes <= 0 || len(f.Names) == 0 {
		return nil, nil
	}
	var nowEmpty []Empty
	look := func(dir string, project bool) (string, Stamp, bool) {
		for _, p := range prev {
			if (p.Global && !project) || (!p.Global && project && p.Dir == dir) {
				// A file was there: look for it as the first time (the
				// folder's time says nothing of a file written in place).
				return f.first(dir, project)
			}
		}
		now := time.Now()
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return "", Stamp{}, false // no folder: none to find in it
		}
		e := Empty{Dir: dir, Stamp: Stamp{Size: fi.Size(), Mod: fi.ModTime()}, Looked: now}
		for _, was := range empty {
			if was.Dir == dir && was.Stamp == e.Stamp && was.Looked.Sub(was.Stamp.Mod) >= settled {
				nowEmpty = append(nowEmpty, was)
				return "", Stamp{}, false
			}
		}
		path, st, ok := f.first(dir, project)
		if !ok {
			nowEmpty = append(nowEmpty, e)
		}
		return path, st, ok
	}
	known := make(map[string]*File, len(prev))
	for i := range prev {
		known[prev[i].Path] = &prev[i]
	}
	var out []File
	left := f.MaxBytes
	add := func(path, dir string, global bool, st Stamp) {
		file := File{Path: path, Dir: dir, Global: global, Stamp: st, budget: left}
		if old := known[path]; old != nil && old.Stamp == st && old.budget == left {
			file = *old
		} else if left == 0 {
			file.Skipped, file.Cut = true, st.Size
		} else {
			file.Text, file.Cut = readBounded(path, left)
		}
		left -= len(file.Text)
		if file.Cut > 0 {
			left = 0 // what is left of the budget is less than a line
		}
		out = append(out, file)
	}
	if f.Global != "" {
		if path, st, ok := look(f.Global, false); ok {
			add(path, "", true, st)
		}
	}
	for _, dir := range chain(root, cwd) {
		if path, st, ok := look(dir, true); ok {
			add(path, dir, false, st)
		}
	}
	return out, nowEmpty
}

// Nested returns the instruction files that apply to paths (files a tool
// call touched) and are not in the system prompt: those of the folders
// between each path and the chain from root to cwd, outermost first. A
// file seen holds with the same stamp was shown already and is left out;
// one whose stamp changed is read again. Paths outside root have none.
func (f Finder) Nested(root, cwd string, paths []string, seen map[string]Stamp) []File {
	if f.MaxBytes <= 0 || len(f.Names) == 0 {
		return nil
	}
	var out []File
	visited := map[string]bool{}
	for _, p := range paths {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || !inside(p, root) {
			continue
		}
		dir := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		var found []File
		for ; !inside(cwd, dir) && inside(dir, root) && !visited[dir]; dir = filepath.Dir(dir) {
			visited[dir] = true
			path, st, ok := f.first(dir, true)
			if !ok {
				continue
			}
			if old, shown := seen[path]; (shown && old == st) || path == p {
				// Shown already, or the file the call read itself.
				continue
			}
			text, cut := readBounded(path, f.MaxBytes)
			found = append(found, File{Path: path, Dir: dir, Text: text, Cut: cut, Stamp: st, budget: f.MaxBytes})
		}
		for i := len(found) - 1; i >= 0; i-- {
			out = append(out, found[i])
		}
	}
	return out
}

// first finds the first of f.Names that is a regular file in dir (links
// followed), asking Allow when project says so.
func (f Finder) first(dir string, project bool) (string, Stamp, bool) {
	for _, name := range f.Names {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if project && f.Allow != nil && !f.Allow(path) {
			continue
		}
		return path, Stamp{Size: fi.Size(), Mod: fi.ModTime()}, true
	}
	return "", Stamp{}, false
}

// readBounded reads at most limit bytes of path, cut at the last line
// break of the second half of what was read when there is more, and never
// in the middle of a character; cut is how many bytes were left out. A
// file that cannot be read is empty.
func readBounded(path string, limit int) (text string, cut int64) {
	fh, err := os.Open(path)
	if err != nil {
		return "", 0
	}
	defer fh.Close()
	buf, err := io.ReadAll(io.LimitReader(fh, int64(limit)+1))
	if err != nil {
		return "", 0
	}
	if len(buf) <= limit {
		return string(bytes.ToValidUTF8(buf, []byte("\uFFFD"))), 0
	}
	size := int64(len(buf))
	if fi, err := fh.Stat(); err == nil {
		size = fi.Size()
	}
	buf = buf[:limit]
	if i := bytes.LastIndexByte(buf, '\n'); i >= limit/2 {
		buf = buf[:i+1]
	}
	for len(buf) > 0 && !utf8.Valid(buf[max(len(buf)-utf8.UTFMax, 0):]) {
		buf = buf[:len(buf)-1]
	}
	return string(bytes.ToValidUTF8(buf, []byte("\uFFFD"))), size - int64(len(buf))
}

// inside says whether path is dir or below it (both clean and absolute).
func inside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// body is a file's text as the model reads it: the text, and a note where
// it was cut or why it is missing.
func (file *File) body() string {
	text := strings.TrimRight(file.Text, "\n")
	switch {
	case file.Skipped:
		return fmt.Sprintf("[not included: the instructions already fill instructions.maxBytes; read %s if you need it]", file.Path)
	case file.Cut > 0:
		return text + fmt.Sprintf("\n[… cut here: %d more bytes of %s are left out (instructions.maxBytes); read the rest if you need it]", file.Cut, file.Path)
	}
	return text
}

// NestedNote is how a subfolder's file is shown after a tool's result.
func NestedNote(file File) string {
	return fmt.Sprintf("\n\n[Project instructions from %s. They apply to every file under %s and, where they disagree with the instructions of a folder above, they win there.]\n%s\n[end of %s]",
		file.Path, file.Dir+string(filepath.Separator), file.body(), file.Path)
}
