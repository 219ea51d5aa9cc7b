package store

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Summary is what List tells of one session file.
type Summary struct {
	ID, Cwd, Title string
	// Owner is the owner the file claims (File.Owner), unverified.
	Owner   string
	Updated time.Time
}

// List returns the sessions stored in Path(cwd, dir, ""), newest Updated
// first (equal times: greater id first, which for mm's date-based ids is
// also the newer one). A missing directory gives an empty list and no error.
// It is Reader.List with a zero Reader: no file is signed, and a skipped
// file is not told.
func List(cwd, dir string) ([]Summary, error) { return (&Reader{}).List(cwd, dir) }

// List returns the sessions stored in Path(cwd, dir, ""), newest Updated
// first (equal times: greater id first, which for mm's date-based ids is
// also the newer one). A missing directory gives an empty list and no error.
//
// Only each file's header is decoded (64 KiB of it at most), never its
// history, so listing stays fast however long the conversations are. Files
// that cannot be read or whose header is not a session header are skipped
// rather than failing the whole list, since one damaged file must not hide
// the others; so are temporary files (names starting with a dot), files
// whose id differs from their name (Load by id could not find them), and
// files from a newer format version (they could not be loaded). A path
// that is not a regular file, or a file over the limit, is skipped too,
// and told to Warn once (ErrRefused). A file with a sound header but a
// damaged history is listed; Load reports the damage when it is opened.
//
// Summary.Cwd is the folder the file was found in, cwd, whatever cwd the
// file claims: a file mm wrote in <cwd>/<dir> names that cwd anyway, and
// one it did not write must not point the client elsewhere. With an
// absolute dir, which several working directories share, a file's claimed
// cwd is used when the file is signed with the Key (which means reading it
// whole), cwd otherwise.
//
// Listing a folder also removes the stale temporary files a killed mm left
// in it (see WriteAtomic).
func (r *Reader) List(cwd, dir string) ([]Summary, error) {
	root := Path(cwd, dir, "")
	sweepTemps(root)
	entries, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return []Summary{}, nil
		}
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	shared := filepath.IsAbs(dir)
	out := make([]Summary, 0, len(entries))
	// One reader is reused for every file: its buffer is the only sizeable
	// allocation, and the header always fits in it.
	br := bufio.NewReaderSize(nil, 4096)
	for _, e := range entries {
		name := e.Name()
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || CheckID(id) != nil {
			continue
		}
		path := filepath.Join(root, name)
		s, err := r.summarize(path, id, cwd, shared, br)
		if errors.Is(err, ErrRefused) {
			r.warn(path, err)
		}
		if err == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Summary) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

// errSkip is summarize's answer for a file that is not a session's.
var errSkip = errors.New("not a session header")

// summarize reads the header of one file; an error means it is skipped.
// With verify, a signed file's own cwd replaces cwd.
func (r *Reader) summarize(path, id, cwd string, verify bool, br *bufio.Reader) (Summary, error) {
	f, size, err := r.open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	br.Reset(io.LimitReader(f, maxHeaderBytes))
	h, err := readHeader(json.NewDecoder(br))
	if err != nil || !h.hasVersion || h.version < 1 || h.version > Version || h.id != id {
		return Summary{}, errSkip
	}
	s := Summary{ID: h.id, Cwd: cwd, Title: h.title, Owner: h.owner, Updated: h.updated}
	if verify && h.cwd != "" && r.Key.verify(f, size) {
		s.Cwd = h.cwd
	}
	return s, nil
}

// header is the part of a session file that precedes its history.
type header struct {
	version    int
	hasVersion bool
	id, cwd    string
	title      string
	owner      string
	updated    time.Time
	seen       uint8 // which of id, cwd, title, owner and updated were read
}

// The bits of header.seen.
const (
	seenID uint8 = 1 << iota
	seenCwd
	seenTitle
	seenUpdated
	seenOwner
	seenAll = seenID | seenCwd | seenTitle | seenUpdated | seenOwner
)

// readHeader decodes the top-level fields of a session file token by token
// and stops as soon as id, cwd, title, owner and updated are read, or at the
// "history" key (a file without a title), never reading the history itself.
// Marshal writes every header field before the history, so this reads a few
// hundred bytes of even a huge file. On an error, the fields read so far are
// returned with it.
func readHeader(dec *json.Decoder) (header, error) {
	var h header
	tok, err := dec.Token()
	if err != nil {
		return h, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return h, errors.New("not a JSON object")
	}
	for h.seen != seenAll && dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return h, err
		}
		key, _ := tok.(string)
		switch key {
		case "history":
			return h, nil
		case "version":
			err = dec.Decode(&h.version)
			h.hasVersion = err == nil
		case "id":
			err = dec.Decode(&h.id)
			h.seen |= seenID
		case "cwd":
			err = dec.Decode(&h.cwd)
			h.seen |= seenCwd
		case "title":
			err = dec.Decode(&h.title)
			h.seen |= seenTitle
		case "updated":
			err = dec.Decode(&h.updated)
			h.seen |= seenUpdated
		case "owner":
			err = dec.Decode(&h.owner)
			h.seen |= seenOwner
		default:
			// Provenance, usage and anything a later version adds to the
			// header are small; skipping them whole is simplest.
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}
