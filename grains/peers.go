package grains

import (
	"crypto/sha256"
	"fmt"
	"net"
	"strconv"

	"github.com/mm-agent/mm/grains/grainspb"
)

// Where the members serve ACP (serve.Peers). A client's connection lives on
// the node that opened it; a client that comes back through a balancer
// that sends it to another node (a WebSocket resume, a streamable HTTP
// request) is passed on to that node. Each node gossips where it serves
// under serveKey; the host is the one the membership gives the member,
// never the gossip's, so that no node can send another's clients
// anywhere but to a member.

// serveKey is the gossip key of a member's grainspb.ServeAt.
const serveKey = "mm.serve"

// Tag names this node in the ids of the connections it opens: its member
// id, which a node that rejoins does not keep (nor does it keep its
// connections).
func (n *Node) Tag() string { return n.sys.ID }

// Advertise gossips where this node serves /acp, once it has joined: its
// port, and for https the SHA-256 of its certificate, which the others
// take as the only one this node may present.
func (n *Node) Advertise(port int, cert []byte) {
	m := n.m.Load()
	if m == nil {
		return
	}
	at := &grainspb.ServeAt{Port: uint32(port)}
	if len(cert) > 0 {
		sum := sha256.Sum256(cert)
		at.CertSha256 = sum[:]
	}
	m.c.Gossip.SetState(serveKey, at)
}

// Peer returns where the live member tag serves /acp, as its own gossip
// says (http://host:port or https://host:port, host from the membership),
// and for https the SHA-256 its certificate must have.
func (n *Node) Peer(tag string) (url string, certSHA256 []byte, ok bool) {
	m := n.m.Load()
	if m == nil || tag == "" {
		return "", nil, false
	}
	m.mu.Lock()
	host, live := m.hosts[tag]
	m.mu.Unlock()
	if !live {
		return "", nil, false
	}
	state, err := m.c.Gossip.GetState(serveKey)
	if err != nil {
		return "", nil, false
	}
	kv := state[tag]
	if kv == nil || kv.Value == nil {
		return "", nil, false
	}
	var at grainspb.ServeAt
	if err := kv.Value.UnmarshalTo(&at); err != nil || at.Port == 0 || at.Port > 65535 {
		return "", nil, false
	}
	scheme := "http"
	switch len(at.CertSha256) {
	case 0:
	case sha256.Size:
		scheme = "https"
	default:
		n.log.Warn(fmt.Sprintf("cluster: the member %s gossips a certificate hash of %d bytes: not taken", tag, len(at.CertSha256)))
		return "", nil, false
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(int(at.Port))), at.CertSha256, true
}
