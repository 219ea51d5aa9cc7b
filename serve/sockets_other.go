//go:build !unix

package serve

import "net"

// waiting is false where mm cannot peek at a socket: a client is known to
// have spoken once the server has read from its socket.
func waiting(net.Conn) bool { return false }
