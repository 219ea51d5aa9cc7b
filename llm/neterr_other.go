//go:build !windows

package llm

import "syscall"

// Elsewhere the syscall constants are the errors themselves.
const (
	wsaConnRefused = syscall.ECONNREFUSED
	wsaConnReset   = syscall.ECONNRESET
)
