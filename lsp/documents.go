package lsp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.lsp.dev/protocol"
	"go.lsp.dev/uri"
)

const (
	// maxOpen bounds the documents a server holds open for mm; the least
	// recently asked about is closed first. Every open document is read from
	// disk before each call, so the bound is also a bound on that work.
	maxOpen = 32
	// maxStamps bounds the files watched for changes on disk.
	maxStamps = 2000
)

// document is a file open in a server: the text the server has, and its
// version.
type document struct {
	version int32
	text    string
	used    int64 // the server's clock at the last call about it
}

// stamp is what a watched file looked like when last seen.
type stamp struct {
	mod  time.Time
	size int64
}

// didChangeParams is textDocument/didChange's params with a change event
// of the whole text. protocol.TextDocumentContentChangeEvent cannot say
// that: its Range is not a pointer, so it always sends a range, and a
// zero range turns the whole new text into an insertion at the start of
// the old one.
type didChangeParams struct {
	TextDocument   protocol.VersionedTextDocumentIdentifier `json:"textDocument"`
	ContentChanges []wholeText                              `json:"contentChanges"`
}

type wholeText struct {
	Text string `json:"text"`
}

// prepare brings the server's view of the files up to date before a call
// about path and returns path's text as the server now has it. Open
// documents that changed on disk get didChange (didClose when they are
// gone), watched files that changed are reported with
// workspace/didChangeWatchedFiles, and path is opened, or changed, with its
// content on disk.
func (srv *server) prepare(ctx context.Context, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %v", path, cause(err))
	}
	text := string(b)

	for p, d := range srv.docs {
		if p == path {
			continue
		}
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := srv.closeDoc(ctx, p); err != nil {
				return "", err
			}
		case err != nil:
			// Unreadable for now: the server keeps the last text it had.
		case string(b) != d.text:
			if err := srv.changeDoc(ctx, p, d, string(b)); err != nil {
				return "", err
			}
		}
	}

	var events []*protocol.FileEvent
	for p, st := range srv.stamps {
		if _, open := srv.docs[p]; open || p == path {
			continue
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			events = append(events, &protocol.FileEvent{Type: protocol.FileChangeTypeDeleted, URI: uri.File(p)})
			delete(srv.stamps, p)
		case !fi.ModTime().Equal(st.mod) || fi.Size() != st.size:
			events = append(events, &protocol.FileEvent{Type: protocol.FileChangeTypeChanged, URI: uri.File(p)})
			srv.stamps[p] = stamp{fi.ModTime(), fi.Size()}
		}
	}
	if len(events) > 0 {
		if err := srv.rpc.DidChangeWatchedFiles(ctx, &protocol.DidChangeWatchedFilesParams{Changes: events}); err != nil {
			return "", err
		}
	}

	srv.clock++
	if d := srv.docs[path]; d != nil {
		d.used = srv.clock
		if d.text != text {
			if err := srv.changeDoc(ctx, path, d, text); err != nil {
				return "", err
			}
		}
		return text, nil
	}
	if len(srv.docs) >= maxOpen {
		if err := srv.closeLeastUsed(ctx); err != nil {
			return "", err
		}
	}
	// The watched stamp is dropped: an open document is compared whole.
	delete(srv.stamps, path)
	err = srv.rpc.DidOpen(ctx, &protocol.DidOpenTextDocumentParams{TextDocument: protocol.TextDocumentItem{
		URI:        uri.File(path),
		LanguageID: protocol.LanguageIdentifier(languageID(path)),
		Version:    1,
		Text:       text,
	}})
	if err != nil {
		return "", err
	}
	srv.docs[path] = &document{version: 1, text: text, used: srv.clock}
	return text, nil
}

// changeDoc sends the whole new text of an open document. The document's
// state changes only once the notification is written: a call cancelled
// before that leaves the server as it was, and the next call sends the
// change again.
func (srv *server) changeDoc(ctx context.Context, path string, d *document, text string) error {
	err := srv.conn.Notify(ctx, protocol.MethodTextDocumentDidChange, &didChangeParams{
		TextDocument: protocol.VersionedTextDocumentIdentifier{
			TextDocumentIdentifier: protocol.TextDocumentIdentifier{URI: uri.File(path)},
			Version:                d.version + 1,
		},
		ContentChanges: []wholeText{{Text: text}},
	})
	if err != nil {
		return err
	}
	d.version++
	d.text = text
	return nil
}

// closeDoc closes an open document; the server reads it from disk again.
func (srv *server) closeDoc(ctx context.Context, path string) error {
	err := srv.rpc.DidClose(ctx, &protocol.DidCloseTextDocumentParams{
		TextDocument: protocol.TextDocumentIdentifier{URI: uri.File(path)},
	})
	if err != nil {
		return err
	}
	delete(srv.docs, path)
	return nil
}

// closeLeastUsed closes the document asked about least recently, and
// watches it from then on, since the server now reads it from disk.
func (srv *server) closeLeastUsed(ctx context.Context) error {
	var oldest string
	var used int64
	for p, d := range srv.docs {
		if oldest == "" || d.used < used {
			oldest, used = p, d.used
		}
	}
	if err := srv.closeDoc(ctx, oldest); err != nil {
		return err
	}
	srv.watch(oldest)
	return nil
}

// watch starts watching files that a server's answer named, so that the
// server hears when they change on disk: it reads files that are not open
// from disk, and may keep what it read until told otherwise. A file
// watched already keeps its stamp, so that a change since is still
// reported. Files outside the workspace (the standard library, the module
// cache) are not the session's to change, and are not watched.
func (srv *server) watch(paths ...string) {
	for _, p := range paths {
		if _, open := srv.docs[p]; open || !within(srv.root, p) {
			continue
		}
		if _, ok := srv.stamps[p]; ok || len(srv.stamps) >= maxStamps {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			srv.stamps[p] = stamp{fi.ModTime(), fi.Size()}
		}
	}
}

// within says whether path is under root.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// text returns a file's text as the server knows it: an open document's,
// or else the disk's.
func (srv *server) text(path string) (string, error) {
	if d := srv.docs[path]; d != nil {
		return d.text, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %v", path, cause(err))
	}
	return string(b), nil
}

// cause strips the path from a *fs.PathError, for messages that name the
// file already.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
