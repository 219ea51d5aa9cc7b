package lsp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"go.lsp.dev/jsonrpc2"
	"go.lsp.dev/protocol"
	"go.lsp.dev/uri"
)

const (
	// maxLocations bounds the locations listed for the model; the rest are
	// counted.
	maxLocations = 200
	// maxSymbols bounds the lines of an outline.
	maxSymbols = 500
	// maxLineText bounds the source text shown after a location.
	maxLineText = 200
	// maxHover bounds hover text: a package's hover is its whole
	// documentation.
	maxHover = 8000
)

// codeContentModified is LSP's ContentModified error: the server's state
// changed while it worked on the request, which is worth one more try.
const codeContentModified jsonrpc2.Code = -32801

// spot is a request's position, read against the file's current text.
type spot struct {
	pos  protocol.Position
	line string // the line's text
	word string // the identifier under the position, "" if none
	at   string // "line 3, column 9", for messages
}

// perform brings the server's documents up to date and performs the
// request. Errors the server answered are returned as *jsonrpc2.Error, for
// attempt to phrase.
func (c *Client) perform(ctx context.Context, srv *server, r Request) (Result, error) {
	if !srv.supports(r.Action) {
		return Result{}, fmt.Errorf("%s does not support %s", srv.name, r.Action)
	}
	text, err := srv.prepare(ctx, r.Path)
	if err != nil {
		return Result{}, err
	}
	doc := protocol.TextDocumentIdentifier{URI: uri.File(r.Path)}
	if r.Action == "symbols" {
		return srv.symbols(ctx, doc, r.Path)
	}
	sp, err := locate(text, r)
	if err != nil {
		return Result{}, err
	}
	tdpp := protocol.TextDocumentPositionParams{TextDocument: doc, Position: sp.pos}
	var res Result
	switch r.Action {
	case "definition":
		res, err = srv.definition(ctx, tdpp, sp)
	case "references":
		res, err = srv.references(ctx, tdpp, sp)
	case "hover":
		res, err = srv.hover(ctx, tdpp, sp)
	case "rename":
		res, err = srv.rename(ctx, tdpp, sp, r.NewName)
	}
	if err != nil && sp.word == "" && ctx.Err() == nil {
		// The server's own words for this ("no identifier found", "column is
		// beyond end of line") vary; the model needs to hear that its
		// position is off.
		var answer *jsonrpc2.Error
		if errors.As(err, &answer) {
			return Result{}, fmt.Errorf("no symbol at %s", sp.at)
		}
	}
	return res, err
}

// supports says whether the server announced the capability an action
// needs: true, or options, which mean true.
func (srv *server) supports(action string) bool {
	var p any
	switch action {
	case "definition":
		p = srv.caps.DefinitionProvider
	case "references":
		p = srv.caps.ReferencesProvider
	case "hover":
		p = srv.caps.HoverProvider
	case "symbols":
		p = srv.caps.DocumentSymbolProvider
	case "rename":
		p = srv.caps.RenameProvider
	}
	if b, ok := p.(bool); ok {
		return b
	}
	return p != nil
}

// locate converts the request's line and column into an LSP position in
// text, and checks that they are in the file.
func locate(text string, r Request) (spot, error) {
	ls := lines(text)
	if r.Line > len(ls) {
		return spot{}, fmt.Errorf("line %d is past the end of %s, which has %d lines", r.Line, r.Path, len(ls))
	}
	line := ls[r.Line-1]
	n := utf8.RuneCountInString(line)
	if r.Column > n+1 {
		return spot{}, fmt.Errorf("column %d is past the end of line %d, which has %d characters", r.Column, r.Line, n)
	}
	return spot{
		pos:  protocol.Position{Line: uint32(r.Line - 1), Character: toUTF16(line, r.Column-1)},
		line: line,
		word: wordAt(line, r.Column-1),
		at:   fmt.Sprintf("line %d, column %d", r.Line, r.Column),
	}, nil
}

// empty is the text, or the error, for an answer with nothing in it.
func (sp spot) empty(what string) (Result, error) {
	if sp.word == "" {
		return Result{}, fmt.Errorf("no symbol at %s", sp.at)
	}
	return Result{Text: fmt.Sprintf("no %s found for %s at %s", what, sp.word, sp.at)}, nil
}

// call sends a request with protocol.Call, which sends $/cancelRequest
// when ctx ends first, and tries once more if the server answers that the
// content changed under it.
func (srv *server) call(ctx context.Context, method string, params, result any) error {
	err := protocol.Call(ctx, srv.conn, method, params, result)
	var answer *jsonrpc2.Error
	if errors.As(err, &answer) && answer.Code == codeContentModified {
		err = protocol.Call(ctx, srv.conn, method, params, result)
	}
	return err
}

// definition asks textDocument/definition. protocol's Server.Definition
// decodes into []Location only, while servers answer a Location, a list
// of them, or a list of LocationLinks, so the answer is decoded here.
func (srv *server) definition(ctx context.Context, tdpp protocol.TextDocumentPositionParams, sp spot) (Result, error) {
	var raw json.RawMessage
	err := srv.call(ctx, protocol.MethodTextDocumentDefinition, &protocol.DefinitionParams{TextDocumentPositionParams: tdpp}, &raw)
	if err != nil {
		return Result{}, err
	}
	locs, err := decodeLocations(raw)
	if err != nil {
		return Result{}, fmt.Errorf("%s sent a definition that cannot be read: %v", srv.name, err)
	}
	if len(locs) == 0 {
		return sp.empty("definition")
	}
	return Result{Text: srv.listLocations(locs, "definitions")}, nil
}

// locationOrLink holds either a Location or a LocationLink.
type locationOrLink struct {
	protocol.Location
	TargetURI            protocol.DocumentURI `json:"targetUri"`
	TargetSelectionRange protocol.Range       `json:"targetSelectionRange"`
}

func (l locationOrLink) location() protocol.Location {
	if l.URI == "" && l.TargetURI != "" {
		return protocol.Location{URI: l.TargetURI, Range: l.TargetSelectionRange}
	}
	return l.Location
}

// decodeLocations reads Location | Location[] | LocationLink[] | null.
func decodeLocations(raw json.RawMessage) ([]protocol.Location, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []locationOrLink
	if raw[0] == '{' {
		var one locationOrLink
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, err
		}
		items = append(items, one)
	} else if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	locs := make([]protocol.Location, 0, len(items))
	for _, it := range items {
		if l := it.location(); l.URI != "" {
			locs = append(locs, l)
		}
	}
	return locs, nil
}

// references asks textDocument/references, declaration included. protocol's
// Server.References fits the answer (Location[] | null), so it is used.
func (srv *server) references(ctx context.Context, tdpp protocol.TextDocumentPositionParams, sp spot) (Result, error) {
	params := &protocol.ReferenceParams{
		TextDocumentPositionParams: tdpp,
		Context:                    protocol.ReferenceContext{IncludeDeclaration: true},
	}
	locs, err := srv.rpc.References(ctx, params)
	var answer *jsonrpc2.Error
	if errors.As(err, &answer) && answer.Code == codeContentModified {
		locs, err = srv.rpc.References(ctx, params)
	}
	if err != nil {
		return Result{}, err
	}
	if len(locs) == 0 {
		return sp.empty("references")
	}
	sort.SliceStable(locs, func(i, j int) bool {
		a, b := locs[i], locs[j]
		if a.URI != b.URI {
			return place(a.URI) < place(b.URI)
		}
		if a.Range.Start.Line != b.Range.Start.Line {
			return a.Range.Start.Line < b.Range.Start.Line
		}
		return a.Range.Start.Character < b.Range.Start.Character
	})
	return Result{Text: srv.listLocations(locs, "references")}, nil
}

// listLocations writes locations as "path:line:column: text", one per
// line, without duplicates, and watches the files they name.
func (srv *server) listLocations(locs []protocol.Location, what string) string {
	files := map[string][]string{}
	seen := map[string]bool{}
	var b strings.Builder
	n := 0
	for _, l := range locs {
		path, isFile := filePath(l.URI)
		line := int(l.Range.Start.Line)
		var text string
		col := int(l.Range.Start.Character) + 1
		if isFile {
			ls, ok := files[path]
			if !ok {
				if t, err := srv.text(path); err == nil {
					ls = lines(t)
				}
				files[path] = ls
				srv.watch(path)
			}
			if line < len(ls) {
				text = ls[line]
				col = fromUTF16(text, l.Range.Start.Character) + 1
			}
		}
		key := fmt.Sprintf("%s:%d:%d", place(l.URI), line+1, col)
		if seen[key] {
			continue
		}
		seen[key] = true
		n++
		if n > maxLocations {
			continue
		}
		b.WriteString(key)
		if t := strings.TrimSpace(text); t != "" {
			b.WriteString(": ")
			b.WriteString(clip(t, maxLineText))
		}
		b.WriteByte('\n')
	}
	if n > maxLocations {
		fmt.Fprintf(&b, "… and %d more %s\n", n-maxLocations, what)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// hover asks textDocument/hover. protocol's Hover has Contents as
// MarkupContent only, while servers also send the older MarkedString forms
// (a string, {language, value}, or a list of either), so the answer is
// decoded here.
func (srv *server) hover(ctx context.Context, tdpp protocol.TextDocumentPositionParams, sp spot) (Result, error) {
	var raw struct {
		Contents json.RawMessage `json:"contents"`
	}
	err := srv.call(ctx, protocol.MethodTextDocumentHover, &protocol.HoverParams{TextDocumentPositionParams: tdpp}, &raw)
	if err != nil {
		return Result{}, err
	}
	text := strings.TrimSpace(hoverText(raw.Contents))
	if text == "" {
		return sp.empty("hover information")
	}
	if n := utf8.RuneCountInString(text); n > maxHover {
		text = clip(text, maxHover) + fmt.Sprintf("\n(hover text cut at %d of its %d characters)", maxHover, n)
	}
	return Result{Text: text}, nil
}

// hoverText reads MarkupContent | MarkedString | MarkedString[], where a
// MarkedString is a string or {language, value}.
func hoverText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	case '[':
		var items []json.RawMessage
		_ = json.Unmarshal(raw, &items)
		var parts []string
		for _, it := range items {
			if s := strings.TrimSpace(hoverText(it)); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n\n")
	case '{':
		var m struct {
			Kind     string `json:"kind"`
			Language string `json:"language"`
			Value    string `json:"value"`
		}
		_ = json.Unmarshal(raw, &m)
		if m.Language != "" {
			return "```" + m.Language + "\n" + strings.TrimRight(m.Value, "\n") + "\n```"
		}
		return m.Value
	}
	return ""
}
