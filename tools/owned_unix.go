//go:build unix

package tools

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByUs says whether fi, from Lstat, is this user's own and writable
// by no one else.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o022 == 0
}
