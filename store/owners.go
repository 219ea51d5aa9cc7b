package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Folders have owners on a shared server (mm serve): the first token to
// open a session in a folder owns it, and no other token opens a session
// in it, inside it, or in a folder that holds it (ClaimFolders). The
// record is the store's, so that it outlives the process and, in Postgres,
// spans the machines that share the database: the file store keeps it in
// mm's state folder (Owners, owners.json), Postgres in mm_folders.
//
// The folders are compared as they are on disk, links followed (the
// caller resolves them), and by whole path elements: /w/p1 holds /w/p1/a,
// not /w/p10.

// ErrFolderTaken refuses a folder that another owner owns, lies in, or
// holds. Its message names the folder, never the owner.
var ErrFolderTaken = errors.New("another token's folder, inside one, or holding one")

// FolderTakenError is ErrFolderTaken for one folder.
type FolderTakenError struct {
	// Folder is the folder refused, as it was given.
	Folder string
}

func (e *FolderTakenError) Error() string { return e.Folder + ": " + ErrFolderTaken.Error() }

// Unwrap makes a FolderTakenError an ErrFolderTaken.
func (e *FolderTakenError) Unwrap() error { return ErrFolderTaken }

// FolderOwner is one folder of the record and its owner.
type FolderOwner struct {
	Folder, Owner string
}

// within says whether path is dir or lies below it, by whole elements
// (both clean and absolute).
func within(path, dir string) bool {
	if path == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(path, dir)
}

// planClaims decides a claim of owner's, given the recorded folders that
// touch those it names (any may be given: the others are ignored): every
// one of claim and check must not be another owner's, lie in one, nor
// hold one, else a FolderTakenError for the first that does; then it returns
// those of claim to record, the ones not in a folder owner has already
// (nor in another of them).
func planClaims(owner string, claim, check []string, recorded []FolderOwner) ([]string, error) {
	for _, f := range append(slices.Clip(claim), check...) {
		for _, r := range recorded {
			if r.Owner != owner && (within(f, r.Folder) || within(r.Folder, f)) {
				return nil, &FolderTakenError{Folder: f}
			}
		}
	}
	var out []string
	for _, f := range claim {
		owned := slices.ContainsFunc(recorded, func(r FolderOwner) bool { return r.Owner == owner && within(f, r.Folder) })
		if !owned && !slices.ContainsFunc(claim, func(g string) bool { return g != f && within(f, g) }) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// checkFolders refuses folders that are not clean absolute paths: the
// record holds nothing else.
func checkFolders(folders ...[]string) error {
	for _, fs := range folders {
		for _, f := range fs {
			if !filepath.IsAbs(f) || filepath.Clean(f) != f {
				return fmt.Errorf("folder %q: not a clean absolute path", f)
			}
		}
	}
	return nil
}

// Owners is the file store's record of the folders' owners: one small
// JSON file in mm's state folder, owners.json beside the folder index,
//
//	{"version": 1, "folders": {"/work/p1": "alice"}}
//
// replaced whole (WriteAtomic) under a lock that every mm process using
// the state folder takes (owners.lock), so that two claims never both
// succeed. A file mm cannot read is an error, and is never written over:
// nothing in it is lost. Without a state folder (OpenOwners("")) the
// record is this process's only, in memory. Its methods are safe for
// concurrent use.
type Owners struct {
	// path is owners.json; "" keeps the record in mem.
	path string
	mu   sync.Mutex
	mem  map[string]string
	// seen is the file as last read (each of its versions is a new file,
	// renamed in place), and mem what it held: it is read again only when
	// the file at path is another.
	seen fs.FileInfo
}

// ownersVersion is the version of owners.json this mm writes and reads.
const ownersVersion = 1

// ownersFile is owners.json.
type ownersFile struct {
	Version int               `json:"version"`
	Folders map[string]string `json:"folders"`
}

// OpenOwners uses stateDir/owners.json; "" keeps the record in memory,
// for this process only.
func OpenOwners(stateDir string) *Owners {
	if stateDir == "" {
		return &Owners{mem: map[string]string{}}
	}
	return &Owners{path: filepath.Join(stateDir, "owners.json")}
}

// Path is the record's file, "" when it is kept in memory.
func (o *Owners) Path() string { return o.path }

// read returns the record: an empty one when there is no file yet.
func (o *Owners) read() (map[string]string, error) {
	if o.path == "" {
		return o.mem, nil
	}
	f, err := os.Open(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the record of the folders' owners: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("the record of the folders' owners: %w", err)
	}
	if o.seen != nil && os.SameFile(o.seen, fi) && o.seen.Size() == fi.Size() && o.seen.ModTime().Equal(fi.ModTime()) {
		return o.mem, nil
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("the record of the folders' owners: %w", err)
	}
	bad := func(why string) error {
		return fmt.Errorf("the record of the folders' owners, %s, is corrupt (%s): %w; mm leaves it as it is: mend it or move it away", o.path, why, ErrCorrupt)
	}
	var rec ownersFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, bad(jsonReason(err))
	}
	if dec.More() {
		return nil, bad("more after the record")
	}
	switch {
	case rec.Version > ownersVersion:
		return nil, fmt.Errorf("the record of the folders' owners, %s, is of version %d, this mm reads up to %d: %w: upgrade mm", o.path, rec.Version, ownersVersion, ErrVersion)
	case rec.Version != ownersVersion:
		return nil, bad(fmt.Sprintf("version %d", rec.Version))
	}
	for folder, owner := range rec.Folders {
		if err := checkFolders([]string{folder}); err != nil {
			return nil, bad(err.Error())
		}
		if owner == "" {
			return nil, bad(fmt.Sprintf("folder %q has no owner", folder))
		}
	}
	if rec.Folders == nil {
		rec.Folders = map[string]string{}
	}
	o.seen, o.mem = fi, rec.Folders
	return rec.Folders, nil
}

// write replaces the record with m.
func (o *Owners) write(m map[string]string) error {
	if o.path == "" {
		o.mem = m
		return nil
	}
	b, err := json.MarshalIndent(ownersFile{Version: ownersVersion, Folders: m}, "", "  ")
	if err != nil {
		return err
	}
	o.seen, o.mem = nil, nil
	if err := WriteAtomic(o.path, append(b, '\n')); err != nil {
		return fmt.Errorf("the record of the folders' owners: %w", err)
	}
	// What was written is what the next read would find: it is kept, so
	// that the next claim does not read the file back (a record of
	// thousands of folders took milliseconds to decode). The claim holds
	// the record's lock, so the file stat sees is the one just renamed in
	// place; another mm's write after it makes the file at path another,
	// and it is read again.
	if fi, err := os.Stat(o.path); err == nil {
		o.seen, o.mem = fi, m
	}
	return nil
}

// Check reads the record, for a server that starts: nil, or why it cannot
// be read.
func (o *Owners) Check() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.read()
	return err
}

// Claim makes owner the owner of those of claim it does not own yet,
// once none of claim and check is another owner's, lies in one, or holds
// one (ErrFolderTaken): all of them, or none.
func (o *Owners) Claim(owner string, claim, check []string) error {
	if err := checkFolders(claim, check); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	m, err := o.read()
	if err != nil {
		return err
	}
	plan, err := planClaims(owner, claim, check, records(m))
	if err != nil || len(plan) == 0 {
		return err
	}
	if o.path != "" {
		if err := os.MkdirAll(filepath.Dir(o.path), 0o700); err != nil {
			return fmt.Errorf("the record of the folders' owners: %w", err)
		}
		unlock, err := lockFile(o.path + ".lock")
		if err != nil {
			return fmt.Errorf("the record of the folders' owners: lock: %w", err)
		}
		defer unlock()
	}
	// Read again under the lock: another mm may have claimed since.
	if m, err = o.read(); err != nil {
		return err
	}
	if plan, err = planClaims(owner, claim, check, records(m)); err != nil || len(plan) == 0 {
		return err
	}
	next := make(map[string]string, len(m)+len(plan))
	for f, who := range m {
		next[f] = who
	}
	for _, f := range plan {
		next[f] = owner
	}
	return o.write(next)
}

// NotOf lists, sorted, the folders whose owner is not owner.
func (o *Owners) NotOf(owner string) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m, err := o.read()
	if err != nil {
		return nil, err
	}
	var out []string
	for f, who := range m {
		if who != owner {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out, nil
}

// records is the record as a list.
func records(m map[string]string) []FolderOwner {
	out := make([]FolderOwner, 0, len(m))
	for f, who := range m {
		out = append(out, FolderOwner{Folder: f, Owner: who})
	}
	return out
}

// ClaimFolders is Owners.Claim of the file store's record.
func (s *FileStore) ClaimFolders(_ context.Context, owner string, claim, check []string) error {
	return s.owners.Claim(owner, claim, check)
}

// FoldersNotOf is Owners.NotOf of the file store's record.
func (s *FileStore) FoldersNotOf(_ context.Context, owner string) ([]string, error) {
	return s.owners.NotOf(owner)
}

// CheckOwners reads the file store's record (Owners.Check).
func (s *FileStore) CheckOwners(context.Context) error { return s.owners.Check() }
