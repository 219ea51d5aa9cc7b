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
	e, err := computeEdit(p, a)
	if err != nil {
		return err
	}
	c.edit = e
	c.Proposal = &Diff{Path: p, OldText: &e.old, NewText: e.updated}
	return nil
}

func (editFileTool) run(ctx context.Context, env Env, c *Call) Result {
	a := argsOf[editFileArgs](c)
	p := Resolve(env.Cwd, a.Path)
	// The file is read again: it may have changed since Prepare, while the
	// user was deciding. Unchanged, it gets the very change the user
	// approved; changed, the edit applies to the file as it is now (and
	// fails if old_text is no longer there), and the diff shows what it
	// did.
	e := c.edit
	if cur, err := currentText(p); e == nil || err != nil || cur == nil || *cur != e.old {
		var err error
		if e, err = computeEdit(p, a); err != nil {
			return Result{Output: "[" + err.Error() + "]", Failed: true}
		}
	}
	if ctx.Err() != nil {
		return Result{Output: "[cancelled]", Failed: true}
	}
	if err := writeAtomic(p, e.updated); err != nil {
		return Result{Output: fmt.Sprintf("[cannot write %s: %v]", p, err), Failed: true}
	}
	return Result{Output: e.report(p), Diff: &Diff{Path: p, OldText: &e.old, NewText: e.updated}}
}

// edit is an edit_file change computed in memory.
type edit struct {
	old, updated string
	n            int // replacements
	// how says what the ladder forgave (edit_match.go), "" for an
	// exact match; then changed is the region of updated that new_text
	// took.
	how     string
	changed region
}

// report is what the model reads of an edit made: for a match that
// needed tolerance, what was forgiven and the changed lines, numbered as
// read_file shows them, with three lines around, so that the model can
// check them without reading the file again.
func (e *edit) report(p string) string {
	plural := "s"
	if e.n == 1 {
		plural = ""
	}
	out := fmt.Sprintf("Edited %s: replaced %d occurrence%s of old_text.", p, e.n, plural)
	if e.how == "" {
		return out
	}
	lines := lineTexts(splitLines(e.updated))
	first, last := lineOf(e.updated, e.changed.start), lineOf(e.updated, max(e.changed.end-1, e.changed.start))
	var b strings.Builder
	fmt.Fprintf(&b, "%s old_text matched only after %s: check the result. Lines %d-%d now read:\n", out, e.how, max(first-3, 1), min(last+3, len(lines)))
	for i := max(first-3, 1); i <= min(last+3, len(lines)); i++ {
		l := lines[i-1]
		if len(l) > MaxLineBytes {
			l = l[:validPrefix(l, MaxLineBytes)] + " […]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i, l)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// computeEdit reads the file and applies the replacement in memory: old_text
// as given, or, when it is not in the file, the one place a tolerant match
// finds (edit_match.go); replace_all replaces exact matches only. An error
// is worded for the model.
func computeEdit(p string, a *editFileArgs) (*edit, error) {
	oldText, newText, replaceAll := a.OldText, a.NewText, a.ReplaceAll
	if oldText == "" {
		return nil, errors.New(`old_text is empty; give the exact text to replace, or use write_file to create or overwrite a whole file`)
	}
	if oldText == newText {
		return nil, errors.New("old_text and new_text are the same; there is nothing to change")
	}
	cur, err := currentText(p)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, fmt.Errorf("%s does not exist; use write_file to create it", p)
	}
	text := *cur
	n := strings.Count(text, oldText)
	if n == 0 && replaceAll && strings.Contains(text, "\r\n") && !strings.Contains(oldText, "\r\n") {
		// Models write "\n" where a Windows file has "\r\n".
		crlf := strings.ReplaceAll(oldText, "\n", "\r\n")
		if n = strings.Count(text, crlf); n > 0 {
			oldText, newText = crlf, withLineEnds(newText, true)
		}
	}
	switch {
	case n > 1 && !replaceAll:
		return nil, fmt.Errorf("old_text occurs %d times in %s; add surrounding lines to old_text so that it matches exactly one place, or set replace_all to true to replace every occurrence", n, p)
	case n > 0 && replaceAll:
		return &edit{old: text, updated: strings.ReplaceAll(text, oldText, newText), n: n}, nil
	case n == 1:
		return &edit{old: text, updated: strings.Replace(text, oldText, newText, 1), n: 1}, nil
	case !replaceAll:
		m, amb := findTolerant(text, oldText, newText)
		if amb != nil {
			spans := make([]string, len(amb.regions))
			for i, r := range amb.regions {
				spans[i] = lineSpan(text, r)
			}
			return nil, fmt.Errorf("old_text is not in %s as given, and after %s it matches %d places (lines %s); add surrounding lines to old_text, copied exactly, so that it matches one", p, amb.how, len(amb.regions), strings.Join(spans, ", "))
		}
		if m != nil {
			updated := text[:m.start] + m.newText + text[m.end:]
			return &edit{old: text, updated: updated, n: 1, how: m.how, changed: region{m.start, m.start + len(m.newText)}}, nil
		}
	}
	msg := fmt.Sprintf("old_text not found in %s; read the file again and copy the text exactly, whitespace and indentation included", p)
	if replaceAll {
		return nil, errors.New(msg + " (replace_all replaces exact matches only)")
	}
	if near := closest(text, oldText); near != "" {
		return nil, errors.New(msg + ". It is not there even with trailing whitespace, quotes and dashes, or indentation forgiven; " + strings.TrimSuffix(near, "\n"))
	}
	return nil, errors.New(msg + "; nothing in the file looks like it")
}
