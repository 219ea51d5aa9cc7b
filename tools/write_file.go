package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mm-agent/mm/internal/tempfile"
)

//go:embed write_file.md
var writeFileDescription string

// writeFileArgs are write_file's parameters.
type writeFileArgs struct {
	Path    string `json:"path" alias:"file_path,filePath,file" jsonschema:"The file to write: absolute, relative to the working directory, or starting with ~. Missing parent directories are created."`
	Content string `json:"content" alias:"contents,text" jsonschema:"The whole new content of the file."`
}

var writeFileSpec = specFor[writeFileArgs]("write_file")

type writeFileTool struct{}

func (writeFileTool) Name() string            { return "write_file" }
func (writeFileTool) Description() string     { return writeFileDescription }
func (writeFileTool) Schema() json.RawMessage { return writeFileSpec.schemaCopy() }
func (writeFileTool) Kind() Kind              { return KindEdit }

func (writeFileTool) spec() *spec { return writeFileSpec }

func (writeFileTool) prepare(env Env, c *Call) error {
	a := argsOf[writeFileArgs](c)
	p, err := pathArg("write_file", env, c, a.Path)
	if err != nil {
		return err
	}
	c.Locations = []string{p}
	c.Mutating = true
	old, err := currentText(p)
	if err != nil {
		return err
	}
	c.Proposal = &Diff{Path: p, OldText: old, NewText: a.Content}
	return nil
}

func (writeFileTool) run(ctx context.Context, env Env, c *Call) Result {
	a := argsOf[writeFileArgs](c)
	p := Resolve(env.Cwd, a.Path)
	content := a.Content
	// The old text is read again rather than taken from the Proposal: the
	// diff shown when done must be the change really made.
	old, err := currentText(p)
	if err != nil {
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	if ctx.Err() != nil {
		return Result{Output: "[cancelled]", Failed: true}
	}
	if err := writeAtomic(p, content); err != nil {
		return Result{Output: fmt.Sprintf("[cannot write %s: %v]", p, err), Failed: true}
	}
	lines := strings.Count(content, "\n")
	if content != "" && !strings.HasSuffix(content, "\n") {
		lines++
	}
	var what string
	switch {
	case old == nil:
		what = "created the file"
	case *old == content:
		what = "the content was already the same"
	default:
		what = fmt.Sprintf("replaced the previous %d bytes", len(*old))
	}
	return Result{
		Output: fmt.Sprintf("Wrote %d bytes (%d lines) to %s; %s.", len(content), lines, p, what),
		Diff:   &Diff{Path: p, OldText: old, NewText: content},
	}
}

// currentText returns a file's content, or nil when it does not exist yet.
// Other problems (a directory, no permission) are errors worded for the
// model.
func currentText(p string) (*string, error) {
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		s := string(b)
		return &s, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	}
	if st, serr := os.Stat(p); serr == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a file", p)
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("%s cannot exist: a parent of it is a file, not a directory", p)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("permission denied: %s", p)
	}
	return nil, fmt.Errorf("cannot read %s: %v", p, err)
}

// tempSep separates a target's name from the random part in the name of
// writeAtomic's temporary file: ".<name>.mm-<random>".
const tempSep = ".mm-"

// isWriteTemp reports whether name is one of writeAtomic's temporary files.
func isWriteTemp(name string) bool {
	_, ok := tempfile.Match(name, tempSep)
	return ok
}

// writeAtomic replaces a file's content through a temporary file in the
// same directory and a rename, so that a reader (or a crash) never sees a
// half-written file. The stale temporary files of earlier writes that a
// kill interrupted are removed first (internal/tempfile). A symlink is followed, so that the link stays a link
// and its target gets the content; an existing file keeps its mode. There
// is no fsync: a lost write after a power cut is acceptable here, a slow
// tool on every call is not.
func writeAtomic(p, content string) error {
	target := p
	if r, err := filepath.EvalSymlinks(p); err == nil {
		target = r
	}
	mode := fs.FileMode(0o644)
	var was fs.FileInfo
	if st, err := os.Stat(target); err == nil {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory", p)
		}
		mode, was = st.Mode().Perm(), st
	}
	dir := filepath.Dir(target)
	if err := mkdirOwned(dir); err != nil {
		return err
	}
	// What a killed mm left here would show in git status for good.
	tempfile.Sweep(dir, "tool", isWriteTemp)
	tmp, err := tempfile.Create(dir, "."+filepath.Base(target)+tempSep+"*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer tempfile.Done(name)
	_, werr := tmp.WriteString(content)
	if werr == nil {
		werr = tmp.Chmod(mode)
	}
	if werr == nil {
		werr = chownLike(tmp, was, dir)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(name, target)
	}
	if werr != nil {
		os.Remove(name)
		return werr
	}
	return nil
}
