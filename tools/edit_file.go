package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

//go:embed edit_file.md
var editFileDescription string

// editFileArgs are edit_file's parameters.
type editFileArgs struct {
	Path       string `json:"path" alias:"file_path,filePath,file" jsonschema:"The file to edit: absolute, relative to the working directory, or starting with ~."`
	OldText    string `json:"old_text" alias:"old_string,oldString,oldText" jsonschema:"The exact text to replace, copied from the file, whitespace and indentation included."`
	NewText    string `json:"new_text" alias:"new_string,newString,newText" jsonschema:"The text to put in its place; empty to delete old_text."`
	ReplaceAll bool   `json:"replace_all,omitempty" alias:"replaceAll" jsonschema:"Replace every occurrence of old_text rather than exactly one. Default false."`
}

var editFileSpec = specFor[editFileArgs]("edit_file")

type editFileTool struct{}

func (editFileTool) Name() string            { return "edit_file" }
func (editFileTool) Description() string     { return editFileDescription }
func (editFileTool) Schema() json.RawMessage { return editFileSpec.schemaCopy() }
func (editFileTool) Kind() Kind              { return KindEdit }

func (editFileTool) spec() *spec { return editFileSpec }

// prepare computes the edit from the file as it is now, so that the
// permission request shows the change before it happens; an edit that
// cannot apply fails here, before anyone is asked about it.
func (editFileTool) prepare(env Env, c *Call) error {
	a := argsOf[editFileArgs](c)
	p, err := pathArg("edit_file", env, c, a.Path)
	if err != nil {
		return err
	}
	c.Locations = []string{p}
	c.Mutating = true
	old, updated, _, err := computeEdit(p, a)
	if err != nil {
		return err
	}
	c.Proposal = &Diff{Path: p, OldText: &old, NewText: updated}
	return nil
}

func (editFileTool) run(ctx context.Context, env Env, c *Call) Result {
	a := argsOf[editFileArgs](c)
	p := Resolve(env.Cwd, a.Path)
	// The file is read again: it may have changed since Prepare, while the
	// user was deciding. The edit applies to the file as it is now, and
	// fails if old_text is no longer there.
	old, updated, n, err := computeEdit(p, a)
	if err != nil {
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	if ctx.Err() != nil {
		return Result{Output: "[cancelled]", Failed: true}
	}
	if err := writeAtomic(p, updated); err != nil {
		return Result{Output: fmt.Sprintf("[cannot write %s: %v]", p, err), Failed: true}
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	return Result{
		Output: fmt.Sprintf("Edited %s: replaced %d occurrence%s of old_text.", p, n, plural),
		Diff:   &Diff{Path: p, OldText: &old, NewText: updated},
	}
}

// computeEdit reads the file and applies the replacement in memory. It
// returns the current text, the new text and the number of replacements,
// or an error worded for the model.
func computeEdit(p string, a *editFileArgs) (old, updated string, n int, err error) {
	oldText, newText, replaceAll := a.OldText, a.NewText, a.ReplaceAll
	if oldText == "" {
		return "", "", 0, errors.New(`old_text is empty; give the exact text to replace, or use write_file to create or overwrite a whole file`)
	}
	if oldText == newText {
		return "", "", 0, errors.New("old_text and new_text are the same; there is nothing to change")
	}
	cur, err := currentText(p)
	if err != nil {
		return "", "", 0, err
	}
	if cur == nil {
		return "", "", 0, fmt.Errorf("%s does not exist; use write_file to create it", p)
	}
	text := *cur
	n = strings.Count(text, oldText)
	// Models often write "\n" where a Windows file has "\r\n". When the
	// text is not found as given, it is tried with the file's line endings.
	if n == 0 && strings.Contains(text, "\r\n") && strings.Contains(oldText, "\n") && !strings.Contains(oldText, "\r\n") {
		crlfOld := strings.ReplaceAll(oldText, "\n", "\r\n")
		if k := strings.Count(text, crlfOld); k > 0 {
			oldText, newText, n = crlfOld, strings.ReplaceAll(strings.ReplaceAll(newText, "\r\n", "\n"), "\n", "\r\n"), k
		}
	}
	switch {
	case n == 0:
		return "", "", 0, fmt.Errorf("old_text not found in %s; read the file again and copy the text exactly, whitespace and indentation included", p)
	case n > 1 && !replaceAll:
		return "", "", 0, fmt.Errorf("old_text occurs %d times in %s; add surrounding lines to old_text so that it matches exactly one place, or set replace_all to true to replace every occurrence", n, p)
	}
	if replaceAll {
		updated = strings.ReplaceAll(text, oldText, newText)
	} else {
		updated = strings.Replace(text, oldText, newText, 1)
	}
	return text, updated, n, nil
}
