package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configures a Server. Zero values take the defaults named.
type Options struct {
	// Connector opens mm's side of each connection. Required.
	Connector Connector
	// Tokens are the bearer tokens let in. Required: a server without
	// tokens lets nobody in.
	Tokens []Token
	// AllowedOrigins are the Origin header values let in
	// (serve.allowedOrigins).
	AllowedOrigins []string
	// MaxConnections bounds the connections open at once
	// (serve.maxConnections); 0 means 256.
	MaxConnections int
	// MaxMessageBytes bounds one client message (serve.maxMessageBytes);
	// 0 means 16 MiB.
	MaxMessageBytes int
	// MaxIncomingBytes bounds what client messages hold, read and decoded,
	// over every connection, until mm has served or handed them on
	// (serve.maxIncomingBytes, incoming.go); less than twice
	// MaxMessageBytes means the larger of 256 MiB and that.
	MaxIncomingBytes int
	// MessageTimeout is how long one client message may take to arrive
	// whole (serve.messageTimeout); 0 means a minute.
	MessageTimeout time.Duration
	// StallTimeout ends a connection whose client takes none of its output
	// this long (serve.stallTimeout); 0 means 30 s.
	StallTimeout time.Duration
	// DrainTimeout is how long a connection with a request in flight may
	// go on once Serve's context ends (serve.drainTimeout); 0 ends every
	// connection at once.
	DrainTimeout time.Duration
	// ResumeTimeout is how long a resumable WebSocket connection whose
	// socket dropped waits for its client to resume it
	// (serve.resumeTimeout); 0 means a minute.
	ResumeTimeout time.Duration
	// ResumeWindowBytes bounds the frames a resumable connection keeps for
	// a resume (serve.resumeWindowBytes); 0 means 4 MiB.
	ResumeWindowBytes int
	// MaxBufferedBytes bounds what one streamable HTTP connection holds
	// for its client to read; 0 means DefaultMaxBufferedBytes.
	MaxBufferedBytes int
	// MaxBufferedSessionStreams bounds the session streams of one HTTP
	// connection that hold messages and have no reader; 0 means
	// DefaultMaxBufferedSessionStreams.
	MaxBufferedSessionStreams int
	// CertFile and KeyFile serve https and wss (serve.tls); empty serves
	// plain HTTP.
	CertFile, KeyFile string
	// Registry receives the transport's metrics and is served on
	// /metrics; nil makes one with the Go and process collectors.
	Registry *prometheus.Registry
	// Log receives one line per connection opened and closed, and
	// warnings. nil discards them.
	Log *slog.Logger
	// Ready says whether the server takes connections: a cluster node is
	// ready once it has joined. While it says no, /readyz answers 503 and
	// a new connection is refused with 503 and a Retry-After, as past
	// MaxConnections. nil means always ready. It is called on every such
	// request, from their goroutines: it must be quick.
	Ready func() bool
	// Peers are the other nodes of the cluster this server is a node of,
	// which hold the connections they opened: a request for one of those
	// is passed on to its node (forward.go). nil on a server of its own.
	Peers Peers
}

// The bounds of one streamable HTTP connection, as the TypeScript SDK's
// ConnectionLimits has them. Its maxBufferedBytes default is 64 MiB; mm's
// is smaller because a server holds up to serve.maxConnections of them.
const (
	DefaultMaxBufferedBytes          = 8 << 20
	DefaultMaxBufferedSessionStreams = 1024
	// maxIDLength bounds a request or session id, in characters.
	maxIDLength = 1024
)

// Server serves ACP on /acp, both transports, and /healthz, /readyz and
// /metrics.
type Server struct {
	o    Options
	keys *keyring
	reg  *prometheus.Registry
	// incoming is the room for client messages being read (incoming.go);
	// sockets the TCP connections not yet proven by a token (sockets.go).
	incoming *incoming
	sockets  *sockets
	metrics  *metrics
	cert     *tls.Certificate
	metricH  http.Handler

	mu       sync.Mutex
	conns    map[*connection]struct{}
	byID     map[string]*httpConn // the streamable HTTP connections, by Acp-Connection-Id
	draining bool
	wg       sync.WaitGroup // one per connection, until release

	// peerTr are the transports to the other nodes of a cluster, by
	// address and certificate (forward.go).
	peersMu sync.Mutex
	peerTr  map[string]*http.Transport
}

// New checks o and builds a server; its certificate, if any, is read here.
func New(o Options) (*Server, error) {
	if o.Connector == nil {
		return nil, errors.New("serve: no Connector")
	}
	if len(o.Tokens) == 0 {
		return nil, errors.New("serve: no token: nobody could connect")
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = 256
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 16 << 20
	}
	if o.MaxIncomingBytes < 2*o.MaxMessageBytes {
		o.MaxIncomingBytes = max(256<<20, 2*o.MaxMessageBytes)
	}
	if o.MessageTimeout <= 0 {
		o.MessageTimeout = time.Minute
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.ResumeTimeout <= 0 {
		o.ResumeTimeout = time.Minute
	}
	if o.ResumeWindowBytes <= 0 {
		o.ResumeWindowBytes = 4 << 20
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if o.MaxBufferedSessionStreams <= 0 {
		o.MaxBufferedSessionStreams = DefaultMaxBufferedSessionStreams
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = NewRegistry()
	}
	s := &Server{o: o, keys: newKeyring(o.Tokens), reg: o.Registry, conns: map[*connection]struct{}{}, byID: map[string]*httpConn{},
		incoming: newIncoming(int64(o.MaxIncomingBytes)), sockets: newSockets(o.MaxConnections)}
	s.metrics = newMetrics(o.Registry, s.incoming)
	s.metricH = promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("serve.tls: %w", err)
		}
		s.cert = &cert
	}
	return s, nil
}

// Registry is where /metrics reads from: the runtime behind the Connector
// registers its collectors here.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// TLS says whether the server speaks https and wss.
func (s *Server) TLS() bool { return s.cert != nil }

// Serve answers on ln until ctx ends, then drains: /readyz answers 503 and
// new connections are refused; a connection whose client waits for no
// answer ends at once, the others once answered or after DrainTimeout;
// ending a connection closes mm's inbox, so mm cancels its turns and saves
// its sessions. Serve returns once every connection is over, nil unless
// the listener failed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protos http.Protocols
	protos.SetHTTP1(true)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       s.sockets.accept,
		ConnState:         s.sockets.state,
		ErrorLog:          slog.NewLogLogger(s.o.Log.Handler(), slog.LevelWarn),
		Protocols:         &protos,
	}
	if s.cert != nil {
		protos.SetHTTP2(true)
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.cert}, MinVersion: tls.VersionTLS12}
	} else {
		// HTTP/2 without TLS (h2c, prior knowledge), for proxies that
		// speak it to their backends.
		protos.SetUnencryptedHTTP2(true)
	}
	ln = listener{ln} // its sockets say whether their clients have spoken (sockets.go)
	errc := make(chan error, 1)
	go func() {
		if s.cert != nil {
			errc <- hs.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		s.drain()
		s.wg.Wait()
		s.closePeers()
		return err
	case <-ctx.Done():
	}
	s.drain()
	s.wg.Wait()
	// What is left is streams delivering their last messages, bounded by
	// the stall timeout per write.
	sctx, cancel := context.WithTimeout(context.Background(), s.o.StallTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	<-errc
	s.closePeers()
	return nil
}

// drain refuses new connections and ends the open ones as they fall idle.
func (s *Server) drain() {
	s.mu.Lock()
	s.draining = true
	conns := make([]*connection, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.o.Log.Info(fmt.Sprintf("[serve] draining: no new connection; %d open, turns in flight have serve.drainTimeout (%s)", len(conns), s.o.DrainTimeout))
	for _, c := range conns {
		c.startDrain(s.o.DrainTimeout)
	}
}

// ServeHTTP routes /acp, /healthz, /readyz and /metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		text(w, http.StatusOK, "ok")
	case "/readyz":
		s.mu.Lock()
		draining := s.draining
		s.mu.Unlock()
		if draining {
			text(w, http.StatusServiceUnavailable, "draining")
			return
		}
		if !s.ready() {
			text(w, http.StatusServiceUnavailable, "not ready")
			return
		}
		text(w, http.StatusOK, "ready")
	case "/metrics":
		if _, ok := s.admit(w, r); ok {
			s.metricH.ServeHTTP(w, r)
		}
	case "/acp":
		owner, ok := s.admit(w, r)
		if !ok {
			return
		}
		if s.forward(w, r) {
			return
		}
		switch r.Method {
		case http.MethodGet:
			if isUpgrade(r) {
				s.serveWebSocket(w, r, owner)
				return
			}
			s.get(w, r, owner)
		case http.MethodPost:
			s.post(w, r, owner)
		case http.MethodDelete:
			s.delete(w, r, owner)
		default:
			text(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		}
	default:
		http.NotFound(w, r)
	}
}

// admit lets in a request with an allowed Origin (or none) and a known
// token, before anything of its body is read; it answers the others, 403
// or 401.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !allowedOrigin(r, s.o.AllowedOrigins) {
		s.metrics.refused.WithLabelValues("origin").Inc()
		w.Header().Set("Connection", "close") // no second try on this socket
		text(w, http.StatusForbidden, "Origin not allowed (serve.allowedOrigins)")
		return "", false
	}
	owner, ok := s.keys.owner(r)
	if !ok {
		s.metrics.refused.WithLabelValues("token").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="mm"`)
		w.Header().Set("Connection", "close")
		text(w, http.StatusUnauthorized, "Unauthorized")
		return "", false
	}
	s.sockets.proven(r.Context())
	return owner, true
}

// ready says whether Options.Ready lets connections in.
func (s *Server) ready() bool { return s.o.Ready == nil || s.o.Ready() }

// refuse answers a new connection that has no place: 503, with a
// Retry-After for the limit and readiness.
func (s *Server) refuse(w http.ResponseWriter, why string) {
	s.metrics.refused.WithLabelValues(why).Inc()
	switch why {
	case "draining":
		text(w, http.StatusServiceUnavailable, "Server is shutting down")
		return
	case "unready":
		w.Header().Set("Retry-After", "1")
		text(w, http.StatusServiceUnavailable, "Server is not ready (joining its cluster)")
		return
	}
	w.Header().Set("Retry-After", "1")
	text(w, http.StatusServiceUnavailable, "Too many connections (serve.maxConnections)")
}

// checkIDs refuses a request id or session id longer than maxIDLength.
func (s *Server) checkIDs(m message, session string) error {
	if len(session) > maxIDLength {
		return fmt.Errorf("Session ID exceeds maxIdLength (%d)", maxIDLength)
	}
	if id := m.id(); m.isRequest() && len(id.Str) > maxIDLength {
		return fmt.Errorf("Request ID exceeds maxIdLength (%d)", maxIDLength)
	}
	return nil
}

func isUpgrade(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

// headerHas says whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// text answers with a plain-text body, as the TypeScript SDK's server does
// for every status but the JSON ones.
func text(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// Header names of the streamable HTTP transport.
const (
	headerConnectionID = "Acp-Connection-Id"
	headerSessionID    = "Acp-Session-Id"
)
