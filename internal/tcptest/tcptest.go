// Package tcptest gives tests a TCP listener to connect to: whether a
// connection is made is what a test of the network switch asks.
package tcptest

import (
	"net"
	"testing"
)

// Listener listens on a free loopback port, accepts each connection and
// closes it at once, until the test ends; it returns the port.
func Listener(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
