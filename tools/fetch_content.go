package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mm-agent/mm/tools/fetch"
)

//go:embed fetch_content.md
var fetchContentDescription string

// fetchContentArgs are fetch_content's parameters.
type fetchContentArgs struct {
	URL    string `json:"url" alias:"uri" jsonschema:"The http:// or https:// address."`
	Output string `json:"output,omitempty" jsonschema:"Save the content to this file instead of returning it."`
}

var fetchContentSpec = specFor[fetchContentArgs]("fetch_content")

type fetchContentTool struct{}

func (fetchContentTool) Name() string            { return "fetch_content" }
func (fetchContentTool) Description() string     { return fetchContentDescription }
func (fetchContentTool) Schema() json.RawMessage { return fetchContentSpec.schemaCopy() }
func (fetchContentTool) Kind() Kind              { return KindFetch }

func (fetchContentTool) spec() *spec { return fetchContentSpec }

// prepare: reading a page changes nothing and never asks; saving it is a
// write like write_file's, with its permission and its sensitive and
// outside-the-cwd rules (its location is the file written). A save names
// the file in its title, as the model gave it, and its Effect says the
// absolute path and whether an existing file is replaced: the user
// approves a write, and the URL alone does not say where it goes.
func (fetchContentTool) prepare(env Env, c *Call) error {
	a := argsOf[fetchContentArgs](c)
	u := strings.TrimSpace(a.URL)
	c.Title = "fetch_content: " + u
	if u == "" {
		return errors.New(`fetch_content: argument "url" is empty; give an http:// or https:// address`)
	}
	if out := strings.TrimSpace(a.Output); out != "" {
		p := Resolve(env.Cwd, out)
		c.Title += " → " + out
		c.Mutating = true
		c.Locations = []string{p}
		what := "a new file"
		if st, err := os.Stat(p); err == nil {
			if st.IsDir() {
				return fmt.Errorf("fetch_content: output %s is a directory; give the path of the file to write", p)
			}
			what = fmt.Sprintf("replaces the existing file of %d bytes", st.Size())
		}
		c.Effect = fmt.Sprintf("Saves %s to %s (%s).", u, p, what)
	}
	return nil
}

func (fetchContentTool) run(ctx context.Context, env Env, c *Call) Result {
	page, err := fetch.Get(ctx, env.HTTP, strings.TrimSpace(argsOf[fetchContentArgs](c).URL), env.Fetch)
	switch {
	case ctx.Err() != nil:
		return Result{Output: "[cancelled]", Failed: true}
	case err != nil:
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	what := page.ContentType
	if what == "text/html" {
		what += " → Markdown"
	}
	head := fmt.Sprintf("[%s · %s · %d bytes", page.URL, what, page.Bytes)
	if page.Truncated {
		head += fmt.Sprintf("; cut at the %d-byte limit", page.Bytes)
	}
	for _, n := range page.Notes {
		head += "; " + n
	}
	head += "]"
	if len(c.Locations) == 0 {
		return Result{Output: head + "\n" + env.Output.fit(page.Text, documentHead)}
	}
	p := c.Locations[0]
	old, err := currentText(p)
	if err != nil {
		return Result{Output: "[" + err.Error() + "]", Failed: true}
	}
	if err := writeAtomic(p, page.Text); err != nil {
		return Result{Output: fmt.Sprintf("[cannot write %s: %v]", p, err), Failed: true}
	}
	return Result{
		Output: fmt.Sprintf("%s\nSaved %d bytes to %s.", head, len(page.Text), p),
		Diff:   &Diff{Path: p, OldText: old, NewText: page.Text},
	}
}
