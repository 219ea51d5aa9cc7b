//go:build unix

package serve

import (
	"net"
	"syscall"
)

// waiting says whether bytes the client sent wait to be read on c: a
// peek, which never waits.
func waiting(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	found := false
	// Control, not Read: Read would wait for the server's own reader of
	// the socket, which may wait for the client.
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		found = err == nil && n > 0
	})
	return found
}
