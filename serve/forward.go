package serve

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// A connection lives on the node that opened it: its inbox, its frames
// kept for a resume, its SSE streams, and the edge through which its
// sessions live wherever the cluster placed them. A balancer in front of
// the cluster may send the client's next request elsewhere: the socket
// that resumes a dropped WebSocket, or any streamable HTTP request. The
// id of a connection a cluster node opens ends with that node's tag, and
// a node that gets a request for another node's connection passes it on,
// whole and as it came (a reverse proxy, an upgrade spliced), to that
// node, which admits it as it would the client's own: its token, its
// origin. It goes one hop: a request passed on is served where it lands.

// Peers are the other nodes of a cluster (Options.Peers).
type Peers interface {
	// Tag names this node in the ids of the connections it opens: no dot,
	// fixed for the life of the process.
	Tag() string
	// Peer returns where the live node tag serves /acp (http://host:port
	// or https://host:port) and, for https, the SHA-256 of the only
	// certificate it may present; ok is false for a node that is no live
	// member.
	Peer(tag string) (url string, certSHA256 []byte, ok bool)
}

// headerForwardedBy marks a request one node passed on to another: it is
// served where it lands, never passed on again.
const headerForwardedBy = "Mm-Forwarded-By"

// newConnID returns a new connection's id: a random UUID, and on a node
// of a cluster a dot and the node's tag.
func (s *Server) newConnID() string {
	if s.o.Peers == nil {
		return newID()
	}
	return newID() + "." + s.o.Peers.Tag()
}

// heldBy returns the tag of the node that opened connection id; "" for a
// connection of a server of its own or one that names no node.
func heldBy(id string) string {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return ""
	}
	return id[i+1:]
}

// forward passes r on to the node that holds its connection, when that is
// another node of the cluster, and says whether it did (or answered that
// it could not).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) bool {
	if s.o.Peers == nil || r.Header.Get(headerForwardedBy) != "" {
		return false
	}
	id := r.Header.Get(headerConnectionID)
	tag := heldBy(id)
	if tag == "" || tag == s.o.Peers.Tag() || len(id) > maxIDLength {
		return false
	}
	target, pin, ok := s.o.Peers.Peer(tag)
	u, err := url.Parse(target)
	if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.metrics.forwarded.WithLabelValues("gone").Inc()
		text(w, http.StatusNotFound, "the node that held this connection is gone: open a new one and load its sessions")
		return true
	}
	if isUpgrade(r) {
		s.o.Log.Info(fmt.Sprintf("[serve] connection %s is held by node %s: its upgrade goes on to %s", short(id), tag, u.Host))
	}
	s.metrics.forwarded.WithLabelValues("forwarded").Inc()
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
			pr.Out.Header.Set(headerForwardedBy, s.o.Peers.Tag())
		},
		Transport:     s.peerTransport(u, pin),
		FlushInterval: -1, // SSE: each event as it comes
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.metrics.forwarded.WithLabelValues("unreachable").Inc()
			s.o.Log.Warn(fmt.Sprintf("[serve] connection %s: its node %s (%s) cannot be reached: %v", short(id), tag, u.Host, err))
			text(w, http.StatusBadGateway, "the node that holds this connection cannot be reached; try again")
		},
	}
	p.ServeHTTP(w, r)
	return true
}

// short is the head of a connection id, for logs.
func short(id string) string { return id[:min(8, len(id))] }

// peerTransport returns the transport to the node at u: plain for http,
// and for https one that takes only the certificate whose SHA-256 is pin
// (the node's own, as it gossips it over the cluster's mutual TLS), not
// any a CA signed.
func (s *Server) peerTransport(u *url.URL, pin []byte) http.RoundTripper {
	key := u.Scheme + "://" + u.Host + "#" + fmt.Sprintf("%x", pin)
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	if tr, ok := s.peerTr[key]; ok {
		return tr
	}
	if len(s.peerTr) >= maxPeerTransports {
		for k, tr := range s.peerTr { // nodes come and go: forget them all
			tr.CloseIdleConnections()
			delete(s.peerTr, k)
		}
	}
	tr := &http.Transport{
		Proxy:                 nil, // nothing between two nodes
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
	if u.Scheme == "https" {
		tr.TLSClientConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The chain is not what is checked: the pin is.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the node presented no certificate")
				}
				if sum := sha256.Sum256(cs.PeerCertificates[0].Raw); !bytes.Equal(sum[:], pin) {
					return errors.New("the node presented a certificate other than the one it gossips")
				}
				return nil
			},
		}
	}
	if s.peerTr == nil {
		s.peerTr = map[string]*http.Transport{}
	}
	s.peerTr[key] = tr
	return tr
}

// maxPeerTransports bounds the transports kept to other nodes.
const maxPeerTransports = 64

// CertDER is the certificate the server serves https with (its leaf, DER),
// nil for plain http: a cluster node gossips its SHA-256.
func (s *Server) CertDER() []byte {
	if s.cert == nil || len(s.cert.Certificate) == 0 {
		return nil
	}
	return s.cert.Certificate[0]
}

// closePeers closes the idle connections to other nodes, as the server
// stops.
func (s *Server) closePeers() {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	for _, tr := range s.peerTr {
		tr.CloseIdleConnections()
	}
}
