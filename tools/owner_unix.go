//go:build unix

package tools

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// When mm runs as root, the commands it confines run as another user
// (sandbox.user), in folders that user owns: what mm's file tools write
// there must stay that user's, or the agent's next command could not
// change what the agent's last edit wrote. So a file keeps the owner of
// the file it replaces, and a new file or folder takes the owner of the
// folder it is made in. Run by anyone else, mm cannot give files away, and
// what it writes is its user's, as always.

// chownLike gives f the owner of was (the file it replaces), or, for a new
// file, of the folder dir; nothing unless mm runs as root.
func chownLike(f *os.File, was fs.FileInfo, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	from := was
	if from == nil {
		var err error
		if from, err = os.Stat(dir); err != nil {
			return err
		}
	}
	st, ok := from.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 && st.Gid == 0 {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}

// mkdirOwned is os.MkdirAll(dir, 0o755), each folder it makes given the
// owner of the folder that holds it when mm runs as root.
func mkdirOwned(dir string) error {
	if os.Geteuid() != 0 {
		return os.MkdirAll(dir, 0o755)
	}
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent == dir {
		return nil
	}
	if err := mkdirOwned(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	pi, err := os.Stat(parent)
	if err != nil {
		return err
	}
	if st, ok := pi.Sys().(*syscall.Stat_t); ok && (st.Uid != 0 || st.Gid != 0) {
		return os.Lchown(dir, int(st.Uid), int(st.Gid))
	}
	return nil
}
