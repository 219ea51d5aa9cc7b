package llm

import (
	"errors"
	"net"
	"net/url"
	"strings"
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

// isLoopback says whether a server URL names this machine: localhost, a
// loopback address, or the unspecified address a dial reaches this
// machine through. A variable so that tests can take a loopback server for
// a remote one (the retries of a refused connection).
var isLoopback = func(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// absent is the error of a refused connection to a server on this
// machine: nothing listens there, and waiting will not change that. It
// names the URL and how to start a server or point mm at one; start is
// the provider's way to start its server (with the URL's port).
func absent(baseURL, start string) error {
	port := "PORT"
	if u, err := url.Parse(baseURL); err == nil && u.Port() != "" {
		port = u.Port()
	}
	return serverErr("connection refused (%s): no model server is running there. Start one (%s), or set model.baseURL to a server that runs (docs/models.md)",
		baseURL, strings.ReplaceAll(start, "PORT", port))
}
