package llm

import (
	"errors"
	"syscall"
)

// refused and reset say whether a transport error is a refused or a reset
// connection. Windows reports them as Winsock errors, which the syscall
// constants (invented there) do not match.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, wsaConnRefused)
}

func reset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, wsaConnReset)
}
