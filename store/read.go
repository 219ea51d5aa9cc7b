package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// DefaultMaxFileBytes is the largest session file a Reader reads when it is
// given no limit: the default of sessions.maxFileBytes.
const DefaultMaxFileBytes = 64 << 20

// maxHeaderBytes bounds what List reads of one file to find its header.
// Marshal's headers take a few hundred bytes; a long cwd or id a few KiB.
const maxHeaderBytes = 64 << 10

// ErrRefused means the path is not one mm reads as a session file: a
// symbolic link, a FIFO, a device, a directory, or a regular file larger
// than the limit. A session folder may come with a repository, and such a
// file would make mm read its own stdin or stdout, wait forever on a FIFO,
// or fill its memory from /dev/zero.
var ErrRefused = errors.New("not a session file mm reads")

// errLink is what openNoFollow returns for a symbolic link.
var errLink = errors.New("a symbolic link")

// Reader reads session files as what they may be: files in a folder that
// anyone may have written (a repository's .mm/sessions). It opens a file
// without following a link in its last element and without blocking, reads
// only regular files of at most MaxBytes, and checks with Key whether this
// user's mm wrote the file (File.Signed).
//
// Its zero value reads with DefaultMaxFileBytes and no key: no file is
// signed. A Reader is safe for concurrent use; its fields must not change
// once it is in use.
type Reader struct {
	// Key checks the files' signatures; nil signs and trusts nothing.
	Key *Key
	// MaxBytes is the largest file read; 0 means DefaultMaxFileBytes.
	MaxBytes int64
	// Warn, when set, hears once per path why List skipped a file it
	// refuses (ErrRefused), in one line.
	Warn func(string)

	mu     sync.Mutex
	warned map[string]bool // paths Warn was told of, at most maxWarned
}

// maxWarned bounds the paths a Reader remembers having warned of; past it,
// it forgets them all (and may warn of one again).
const maxWarned = 1024

func (r *Reader) limit() int64 {
	if r.MaxBytes > 0 {
		return r.MaxBytes
	}
	return DefaultMaxFileBytes
}

func (r *Reader) refused(what string) error {
	return fmt.Errorf("%w: %s (only regular files of at most %s are read)", ErrRefused, what, byteSize(r.limit()))
}

// open opens path if it is a regular file, not reached through a link, of
// at most the limit; it returns the file and its size.
func (r *Reader) open(path string) (*os.File, int64, error) {
	f, err := openNoFollow(path)
	if errors.Is(err, errLink) {
		return nil, 0, r.refused("a symbolic link")
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, r.refused(kindOf(fi.Mode()))
	}
	if fi.Size() > r.limit() {
		f.Close()
		return nil, 0, r.refused(byteSize(fi.Size()))
	}
	return f, fi.Size(), nil
}

// kindOf names what a file that is not regular is.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// byteSize words a size the way the config writes it.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Load reads and validates the session file at path, as the package-level
// Load does, and sets File.Signed when the file carries this user's
// signature. A path that is not a regular file, or is larger than the
// limit, gives an error wrapping ErrRefused that names it.
func (r *Reader) Load(path string) (*File, error) {
	f, size, err := r.open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s: %w", ErrNotFound, path, fs.ErrNotExist)
	case errors.Is(err, ErrRefused):
		return nil, fmt.Errorf("%s: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("read session file: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	// The file may have grown since it was looked at: the limit holds
	// whatever it became.
	if _, err := buf.ReadFrom(io.LimitReader(f, r.limit()+1)); err != nil {
		return nil, fmt.Errorf("read session file: %w", err)
	}
	data := buf.Bytes()
	if int64(len(data)) > r.limit() {
		return nil, fmt.Errorf("%s: %w", path, r.refused("larger than the limit"))
	}
	file, err := Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	file.Signed = r.Key.verify(bytes.NewReader(data), int64(len(data)))
	return file, nil
}

// warn tells Warn why path was skipped, once per path.
func (r *Reader) warn(path string, err error) {
	if r.Warn == nil {
		return
	}
	r.mu.Lock()
	if r.warned == nil || len(r.warned) >= maxWarned {
		r.warned = map[string]bool{}
	}
	done := r.warned[path]
	r.warned[path] = true
	r.mu.Unlock()
	if !done {
		r.Warn(fmt.Sprintf("session/list: skipped %s: %v", path, err))
	}
}
