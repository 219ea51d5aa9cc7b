package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// FileStore is the default Backend: each session is a file at
// Path(cwd, Dir, id), written atomically (WriteAtomic), read through a
// Reader, with the folders that hold sessions in a Folders index and the
// folders' owners in an Owners record. Its saves are not fenced: one mm
// at a time uses a folder's sessions.
type FileStore struct {
	dir     string
	reader  *Reader
	folders *Folders
	owners  *Owners
}

// NewFileStore keeps sessions under dir (sessions.dir: relative to each
// session's cwd, or absolute), reads them with r (nil: a zero Reader, which
// trusts no file), indexes their folders in folders (nil: no index), and
// records the folders' owners in owners (nil: in memory).
func NewFileStore(dir string, r *Reader, folders *Folders, owners *Owners) *FileStore {
	if r == nil {
		r = &Reader{}
	}
	if owners == nil {
		owners = OpenOwners("")
	}
	return &FileStore{dir: dir, reader: r, folders: folders, owners: owners}
}

var _ Backend = (*FileStore)(nil)

// Load reads the file of session id in cwd's sessions folder.
func (s *FileStore) Load(_ context.Context, cwd, id string) (*File, string, error) {
	path := Path(cwd, s.dir, id)
	f, err := s.reader.Load(path)
	if err == nil && f.ID != id {
		err = fmt.Errorf("%w: the file holds session %q", ErrCorrupt, f.ID)
	}
	if err != nil {
		return nil, path, err
	}
	return f, path, nil
}

// List is Reader.List of cwd.
func (s *FileStore) List(_ context.Context, cwd string) ([]Summary, error) {
	return s.reader.List(cwd, s.dir)
}

// ListAll lists the folders of the index, then folders, each once.
func (s *FileStore) ListAll(ctx context.Context, folders []string) ([]Summary, error) {
	var all []Summary
	seen := map[string]bool{}
	for _, cwd := range append(s.folders.List(s.dir), folders...) {
		if seen[cwd] {
			continue
		}
		seen[cwd] = true
		list, err := s.List(ctx, cwd)
		if err != nil {
			return nil, err
		}
		all = append(all, list...)
	}
	SortSummaries(all)
	return all, nil
}

// Writer starts a Writer of the session's file; rev is unused, since
// files are not fenced.
func (s *FileStore) Writer(cwd, id string, _ int64, onError func(error)) *Writer {
	return NewWriter(Path(cwd, s.dir, id), onError)
}

// Ping is nil: files need no connection.
func (s *FileStore) Ping(context.Context) error { return nil }

// Create writes the session's file with WriteAtomic.
func (s *FileStore) Create(_ context.Context, cwd, id string, data []byte) error {
	return WriteAtomic(Path(cwd, s.dir, id), data)
}

// Delete removes the file of session id from the first of folders that has
// one (and that spare, when set, does not keep).
func (s *FileStore) Delete(ctx context.Context, id string, folders []string, spare func(*File, string, string) bool) (string, error) {
	seen := map[string]bool{}
	for _, cwd := range folders {
		if seen[cwd] {
			continue
		}
		seen[cwd] = true
		path := Path(cwd, s.dir, id)
		if spare != nil {
			f, where, err := s.Load(ctx, cwd, id)
			if err != nil || spare(f, where, cwd) {
				continue // not there, not readable, or not the caller's
			}
		}
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return path, nil
	}
	return "", nil
}

// NoteFolder adds cwd to the folder index (Folders.Add); a failure only
// makes ListAll miss the folder.
func (s *FileStore) NoteFolder(cwd string) { _ = s.folders.Add(cwd) }

// Close does nothing: a file store holds nothing open.
func (s *FileStore) Close() {}

// Folders returns the folders of the index that still hold sessions.
func (s *FileStore) Folders() []string { return s.folders.List(s.dir) }

// SortSummaries puts the newest first (ties: greater id first), as List
// does, across folders.
func SortSummaries(s []Summary) {
	slices.SortFunc(s, func(a, b Summary) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
}
