package lsp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.lsp.dev/protocol"
)

// rename asks textDocument/rename through protocol's Server.Rename and
// turns the WorkspaceEdit into whole-file edits.
func (srv *server) rename(ctx context.Context, tdpp protocol.TextDocumentPositionParams, sp spot, newName string) (Result, error) {
	we, err := srv.rpc.Rename(ctx, &protocol.RenameParams{TextDocumentPositionParams: tdpp, NewName: newName})
	if err != nil {
		return Result{}, err
	}
	if we == nil || (len(we.Changes) == 0 && len(we.DocumentChanges) == 0) {
		if sp.word == "" {
			return Result{}, fmt.Errorf("no symbol at %s", sp.at)
		}
		return Result{}, fmt.Errorf("%s found nothing to rename for %s at %s", srv.name, sp.word, sp.at)
	}
	perFile := map[string][]protocol.TextEdit{}
	add := func(u protocol.DocumentURI, edits []protocol.TextEdit) error {
		p, ok := filePath(u)
		if !ok {
			return fmt.Errorf("the rename changes %s, which is not a file", u)
		}
		perFile[p] = append(perFile[p], edits...)
		return nil
	}
	// documentChanges is preferred when both are sent, as the protocol says.
	if len(we.DocumentChanges) > 0 {
		for _, dc := range we.DocumentChanges {
			if dc.TextDocument.URI == "" {
				// protocol decodes a create, rename or delete operation into
				// a TextDocumentEdit without a document.
				return Result{}, errors.New("the rename would also create, rename or delete files, which the lsp tool cannot do")
			}
			if err := add(dc.TextDocument.URI, dc.Edits); err != nil {
				return Result{}, err
			}
		}
	} else {
		for u, edits := range we.Changes {
			if err := add(u, edits); err != nil {
				return Result{}, err
			}
		}
	}

	res := Result{}
	count := 0
	for p, edits := range perFile {
		old, err := srv.text(p)
		if err != nil {
			return Result{}, fmt.Errorf("the rename changes %s: %v", p, err)
		}
		updated, err := applyEdits(old, edits)
		if err != nil {
			return Result{}, fmt.Errorf("cannot apply the rename to %s: %v", p, err)
		}
		srv.watch(p)
		if updated == old {
			continue
		}
		res.Edits = append(res.Edits, Edit{Path: p, OldText: old, NewText: updated})
		count += len(edits)
	}
	sort.Slice(res.Edits, func(i, j int) bool { return res.Edits[i].Path < res.Edits[j].Path })
	if len(res.Edits) == 0 {
		return Result{}, fmt.Errorf("renaming %s to %s changes nothing", sp.word, newName)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "renamed %s to %s: %d %s in %d %s", sp.word, newName, count, plural(count, "change"), len(res.Edits), plural(len(res.Edits), "file"))
	for _, e := range res.Edits {
		b.WriteString("\n" + e.Path)
	}
	res.Text = b.String()
	return res, nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
