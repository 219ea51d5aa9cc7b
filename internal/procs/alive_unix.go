//go:build unix

package procs

import (
	"errors"
	"syscall"
)

// Alive says whether a process pid exists (of any user): a folder named
// after a process that is gone is left over from it.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
