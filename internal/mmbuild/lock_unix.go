//go:build unix

package mmbuild

import (
	"os"
	"path/filepath"
	"syscall"
)

// lock takes the machine-wide build lock (an flock on a file in the temp
// directory, released by the kernel if the process dies).
func lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "mm-test-build.lock"), os.O_CREATE|os.O_RDWR, 0o666)
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
