package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"go.lsp.dev/protocol"
)

// symbol holds a DocumentSymbol or a SymbolInformation, the two forms of
// a textDocument/documentSymbol answer.
type symbol struct {
	Name           string              `json:"name"`
	Detail         string              `json:"detail"`
	Kind           protocol.SymbolKind `json:"kind"`
	SelectionRange *protocol.Range     `json:"selectionRange"`
	Children       []symbol            `json:"children"`
	Location       *protocol.Location  `json:"location"`
	ContainerName  string              `json:"containerName"`
}

// symbols asks textDocument/documentSymbol through protocol's
// Server.DocumentSymbol, whose []interface{} fits both forms of the answer
// and is read again into symbol.
func (srv *server) symbols(ctx context.Context, doc protocol.TextDocumentIdentifier, path string) (Result, error) {
	list, err := srv.rpc.DocumentSymbol(ctx, &protocol.DocumentSymbolParams{TextDocument: doc})
	if err != nil {
		return Result{}, err
	}
	b, err := json.Marshal(list)
	if err != nil {
		return Result{}, err
	}
	var syms []symbol
	if err := json.Unmarshal(b, &syms); err != nil {
		return Result{}, fmt.Errorf("%s sent symbols that cannot be read: %v", srv.name, err)
	}
	if len(syms) == 0 {
		return Result{Text: "no symbols found in " + path}, nil
	}
	text, _ := srv.text(path)
	o := outline{ls: lines(text)}
	for _, s := range syms {
		o.add(s, 0)
	}
	if o.n > maxSymbols {
		fmt.Fprintf(&o.b, "… and %d more symbols\n", o.n-maxSymbols)
	}
	return Result{Text: strings.TrimSuffix(o.b.String(), "\n")}, nil
}

// outline writes symbols as "line:column kind name detail", indented two
// spaces per level of nesting.
type outline struct {
	ls []string
	b  strings.Builder
	n  int
}

func (o *outline) add(s symbol, depth int) {
	var pos protocol.Position
	switch {
	case s.SelectionRange != nil:
		pos = s.SelectionRange.Start
	case s.Location != nil:
		pos = s.Location.Range.Start
	}
	o.n++
	if o.n <= maxSymbols {
		col := int(pos.Character) + 1
		if int(pos.Line) < len(o.ls) {
			col = fromUTF16(o.ls[pos.Line], pos.Character) + 1
		}
		fmt.Fprintf(&o.b, "%s%d:%d %s %s", strings.Repeat("  ", depth), pos.Line+1, col, kindName(s.Kind), s.Name)
		if d := strings.TrimSpace(oneLine(s.Detail)); d != "" {
			o.b.WriteString(" " + clip(d, 80))
		}
		if s.ContainerName != "" {
			o.b.WriteString(" (in " + s.ContainerName + ")")
		}
		o.b.WriteByte('\n')
	}
	for _, c := range s.Children {
		o.add(c, depth+1)
	}
}

// kindName writes a symbol kind in lower case words: "enum member".
func kindName(k protocol.SymbolKind) string {
	name := k.String()
	if k < protocol.SymbolKindFile || k > protocol.SymbolKindTypeParameter {
		return "symbol"
	}
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
