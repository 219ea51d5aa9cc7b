//go:build !windows

package store

import (
	"errors"
	"os"
	"syscall"
)

// syncDir flushes a directory's entries to disk, so that a rename in it
// survives a power loss. File systems that cannot sync a directory (EINVAL,
// ENOTSUP) give no such guarantee at all, so their refusal is not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}
