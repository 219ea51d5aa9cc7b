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

// Outside listens as Listener does, on an address of this machine that is
// not a loopback one (its first global IPv4 address): what a command in a
// network namespace of its own reaches as "the outside", through
// user-mode networking. It returns host:port; the test is skipped on a
// machine with no such address.
func Outside(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.To4() == nil || !ip.IP.IsGlobalUnicast() {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.IP.String(), "0"))
		if err != nil {
			continue
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
		return ln.Addr().String()
	}
	t.Skip("this machine has no address but loopback: no outside to reach")
	return ""
}
