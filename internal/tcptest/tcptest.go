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
	for _, ip := range globalIPv4(t) {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
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

// OutsideIP is this machine's first global IPv4 address, the one Outside
// listens on: where a process in a network namespace of its own, or a pod
// on this machine, reaches it. The test is skipped on a machine with none.
func OutsideIP(t testing.TB) string {
	t.Helper()
	if ips := globalIPv4(t); len(ips) > 0 {
		return ips[0]
	}
	t.Skip("this machine has no address but loopback")
	return ""
}

// globalIPv4 are this machine's global IPv4 addresses, in the order the
// system lists them.
func globalIPv4(t testing.TB) []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	var out []string
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && ip.IP.IsGlobalUnicast() {
			out = append(out, ip.IP.String())
		}
	}
	return out
}
