package llm

import "syscall"

// Winsock's WSAECONNREFUSED and WSAECONNRESET.
const (
	wsaConnRefused = syscall.Errno(10061)
	wsaConnReset   = syscall.Errno(10054)
)
