//go:build unix

package mmbuild

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lock takes the user's build lock (an flock on a file in the temp
// directory, released by the kernel if the process dies). It is the
// user's, not the machine's: each user builds into a cache of their own,
// and a lock file another user made (root's, before a rootless run of
// scripts/container-test.sh) cannot be opened for writing.
func lock() (func(), error) {
	name := filepath.Join(os.TempDir(), "mm-test-build-"+strconv.Itoa(os.Getuid())+".lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
