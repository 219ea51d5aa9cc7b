package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mm-agent/mm/lsp"
)

//go:embed lsp.md
var lspDescription string

// lspArgs are lsp's parameters.
type lspArgs struct {
	Action  string `json:"action" enum:"definition,references,hover,symbols,rename" jsonschema:"What to ask the language server."`
	Path    string `json:"path" alias:"file_path,filePath,file" jsonschema:"The file."`
	Line    int    `json:"line,omitempty" min:"1" jsonschema:"The symbol's line, from 1."`
	Column  int    `json:"column,omitempty" min:"1" alias:"character" jsonschema:"The symbol's column, from 1, in characters."`
	NewName string `json:"new_name,omitempty" alias:"newName" jsonschema:"rename: the new name."`
}

var lspSpec = specFor[lspArgs]("lsp")

// LSP is a session's language servers.
type LSP interface {
	Do(ctx context.Context, r lsp.Request) (lsp.Result, error)
}

type lspTool struct{}

func (lspTool) Name() string            { return "lsp" }
func (lspTool) Description() string     { return lspDescription }
func (lspTool) Schema() json.RawMessage { return lspSpec.schemaCopy() }
func (lspTool) Kind() Kind              { return KindRead }

func (lspTool) spec() *spec { return lspSpec }

func lspRequest(env Env, c *Call) lsp.Request {
	a := argsOf[lspArgs](c)
	return lsp.Request{
		Action: a.Action, Path: Resolve(env.Cwd, a.Path),
		Line: a.Line, Column: a.Column, NewName: strings.TrimSpace(a.NewName),
	}
}

// prepare checks the call; a rename asks the server for its edits now, so
// that the user approves the changes they see (each file's diff).
func (lspTool) prepare(env Env, c *Call) error {
	r := lspRequest(env, c)
	c.Title = fmt.Sprintf("lsp: %s %s", r.Action, argsOf[lspArgs](c).Path)
	if r.Action != "symbols" {
		c.Title += fmt.Sprintf(":%d:%d", r.Line, r.Column)
	}
	c.Locations = []string{r.Path}
	switch r.Action {
	case "definition", "references", "hover", "symbols":
	case "rename":
		c.Kind, c.Mutating = KindEdit, true
	default:
		return fmt.Errorf(`lsp: "action" must be definition, references, hover, symbols or rename, got %q`, r.Action)
	}
	if r.Action != "symbols" && (r.Line == 0 || r.Column == 0) {
		return fmt.Errorf(`lsp: %s needs "line" and "column" (from 1) of the symbol`, r.Action)
	}
	if env.LSP == nil {
		return fmt.Errorf("lsp: no language server is configured (lsp.servers)")
	}
	if r.Action != "rename" {
		return nil
	}
	if r.NewName == "" {
		return fmt.Errorf(`lsp: rename needs "new_name"`)
	}
	ctx := env.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	res, err := env.LSP.Do(ctx, r)
	if err != nil {
		// The errors that tell of a server's timeout or misbehaviour name
		// lsp already.
		return fmt.Errorf("lsp: %s", strings.TrimPrefix(err.Error(), "lsp: "))
	}
	c.lspText = res.Text
	c.Locations = c.Locations[:0]
	for _, e := range res.Edits {
		old := e.OldText
		c.Edits = append(c.Edits, Diff{Path: e.Path, OldText: &old, NewText: e.NewText})
		c.Locations = append(c.Locations, e.Path)
	}
	return nil
}

func (lspTool) run(ctx context.Context, env Env, c *Call) Result {
	if len(c.Edits) > 0 || argsOf[lspArgs](c).Action == "rename" {
		return applyEdits(c.Edits, c.lspText)
	}
	res, err := env.LSP.Do(ctx, lspRequest(env, c))
	switch {
	case ctx.Err() != nil:
		return Result{Output: "[cancelled]", Failed: true}
	case err != nil:
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	return Result{Output: env.Output.fit(res.Text, documentHead)}
}

// applyEdits writes a rename's files, all or none: each must still hold
// the text the edits were made from, and a write that fails puts back the
// files written before it.
func applyEdits(edits []Diff, summary string) Result {
	for _, e := range edits {
		cur, err := currentText(e.Path)
		if err != nil || cur == nil || *cur != *e.OldText {
			return Result{Output: fmt.Sprintf("[not renamed: %s changed since the rename was computed; try again]", e.Path), Failed: true}
		}
	}
	for i, e := range edits {
		if err := writeAtomic(e.Path, e.NewText); err != nil {
			for _, done := range edits[:i] {
				_ = writeAtomic(done.Path, *done.OldText)
			}
			return Result{Output: fmt.Sprintf("[not renamed: cannot write %s: %v; nothing was changed]", e.Path, err), Failed: true}
		}
	}
	return Result{Output: summary, Edits: edits}
}
