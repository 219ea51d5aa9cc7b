//go:build !windows

package store

import (
	"errors"
	"os"
	"syscall"
)

// openNoFollow opens path for reading without following a symbolic link
// in its last element (a link is errLink) and without blocking (a FIFO
// opens at once instead of waiting for a writer). The caller checks with
// Stat what it opened.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		// O_NOFOLLOW on a link fails with ELOOP (EMLINK on some BSDs).
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, errLink
		}
		return nil, err
	}
	return f, nil
}
