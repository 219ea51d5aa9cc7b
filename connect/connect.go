package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

const (
	// connectDialTimeout bounds the connection and the upgrade.
	connectDialTimeout = 30 * time.Second
	// Drain bounds the wait for the answers of what was sent once stdin
	// has closed.
	Drain = 3 * time.Second
	// maxTracked bounds the requests in flight each way: the editor's
	// sent on and not answered (past it, stdin is not read until one is
	// answered), and the server's asked of the editor. The server stops
	// reading past its acp.maxPending long before.
	maxTracked = 4096
)

// Options wires one bridge.
type Options struct {
	// URL is the served mm's WebSocket URL (URL makes it from what a user
	// writes); Token is sent as Authorization: Bearer, when set.
	URL, Token string
	// MaxLine is acp.maxLineBytes: the longest line sent.
	MaxLine int
	Stdin   io.Reader
	Stdout  io.Writer
	// Stderr receives what mm connect says besides JSON-RPC: that it is
	// connected, a drop and its resume, and a drain that ran out of time.
	Stderr io.Writer
	// ResumeFor bounds the tries to resume a dropped connection; 0 means
	// ResumeFor's default, a minute (mm serve's serve.resumeTimeout).
	ResumeFor time.Duration
	// Ping is how often the socket is checked when nothing comes; a ping
	// unanswered for twice that counts as a drop. 0 means 2 s.
	Ping time.Duration
}

// ResumeFor is how long mm connect tries to resume a dropped connection.
const ResumeFor = time.Minute

// Run connects to the served mm and bridges until stdin closes (and what
// was sent is answered) or ctx ends: then it returns nil. When the server
// refuses the connection, or closes it or goes away while stdin is open,
// it returns an error whose message says why in one line.
func Run(ctx context.Context, o Options) error {
	if o.ResumeFor <= 0 {
		o.ResumeFor = ResumeFor
	}
	if o.Ping <= 0 {
		o.Ping = 2 * time.Second
	}
	ws, resp, err := dial(ctx, o, nil)
	if err != nil {
		return errors.New(dialFailure(o.URL, o.Token, resp, err))
	}
	fmt.Fprintf(o.Stderr, "mm connect: connected to %s\n", o.URL)
	return newBridge(ctx, o, ws, resp.Header.Get("Acp-Connection-Id")).run()
}

// dial opens a socket to the served mm, one that says mm connect will
// resume its connection should it drop (Acp-Resume), with the headers of
// a resume when extra has them.
func dial(ctx context.Context, o Options, extra http.Header) (*websocket.Conn, *http.Response, error) {
	dctx, cancel := context.WithTimeout(ctx, connectDialTimeout)
	defer cancel()
	h := http.Header{}
	if o.Token != "" {
		h.Set("Authorization", "Bearer "+o.Token)
	}
	h.Set("Acp-Resume", "1")
	for k, v := range extra {
		h[k] = v
	}
	ws, resp, err := websocket.Dial(dctx, o.URL, &websocket.DialOptions{HTTPHeader: h, HTTPClient: noRedirects})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(-1) // frames bounds each frame, and skips a longer one
	return ws, resp, nil
}

// noRedirects is the client mm connect dials with: a redirect is refused,
// not followed, since following it would send the token to wherever the
// server points (Go's client keeps Authorization for another port of the
// same host).
var noRedirects = &http.Client{CheckRedirect: func(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("the server redirects to %s: mm connect does not follow redirects, which would send your token there; use the URL it gives, if you trust it", req.URL.Redacted())
}}

// URL is the WebSocket URL of raw: http and https become ws and
// wss, and a URL without a path gets mm serve's, /acp.
func URL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("%q: the URL must start with wss://, ws://, https:// or http://", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q: the URL names no host", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/acp"
	}
	return u.String(), nil
}

// dialFailure says in one line why the connection to target was not made.
func dialFailure(target, token string, resp *http.Response, err error) string {
	if resp != nil {
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			if token == "" {
				return "the server refused the token: MM_TOKEN is not set"
			}
			return "the server refused the token"
		case http.StatusForbidden:
			return "the server refused the connection (403 Forbidden): mm serve answers that to an Origin that serve.allowedOrigins does not list"
		case http.StatusServiceUnavailable:
			why := "the server has no place for a connection (503 Service Unavailable): it is at serve.maxConnections, or shutting down"
			if ra := resp.Header.Get("Retry-After"); ra != "" {
				why += "; retry after " + ra + " s"
			}
			return why
		case http.StatusNotFound:
			return fmt.Sprintf("nothing at %s (404 Not Found); mm serve's endpoint is /acp", target)
		}
		return fmt.Sprintf("the server answered %q to the WebSocket upgrade at %s", resp.Status, target)
	}
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		badCert   x509.CertificateInvalidError
		notTLS    tls.RecordHeaderError
		dnsErr    *net.DNSError
		opErr     *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &badCert):
		return fmt.Sprintf("the server's TLS certificate is not trusted: %v", tlsCause(err))
	case errors.As(err, &notTLS), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("the server at %s does not speak TLS: use ws:// or http://", target)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot find the server: %v", dnsErr)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("cannot reach %s: connection refused (is mm serve listening there?)", hostOf(target))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer from %s within %v", hostOf(target), connectDialTimeout)
	case errors.As(err, &opErr):
		return fmt.Sprintf("cannot reach %s: %v", hostOf(target), opErr.Err)
	}
	return fmt.Sprintf("cannot connect to %s: %v", target, err)
}

// tlsCause is the certificate error inside err, without the layers of
// the dial around it.
func tlsCause(err error) error {
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) {
		return cve.Err
	}
	return err
}

func hostOf(target string) string {
	if u, err := url.Parse(target); err == nil {
		return u.Host
	}
	return target
}
