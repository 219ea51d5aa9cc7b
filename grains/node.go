package grains

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/protocol"
)

// Node is mm serve as a node of a cluster (cluster.name set), as mm-node
// runs it: a member hosting the session grains of its hub, and the edge
// through which its own connections' sessions live wherever the cluster
// places them.
type Node struct {
	sys  *System
	host *Host
	log  *slog.Logger
	m    atomic.Pointer[Member]
	edge atomic.Pointer[Edge]
	// out is closed once the cluster counted this node out (Rejoin); why
	// says why.
	out     chan struct{}
	why     atomic.Pointer[string]
	outOnce sync.Once
}

// NewNode makes a node and its actor system, which its hub's runtime is to
// run in (System); Join makes it a member.
func NewNode(log *slog.Logger) *Node {
	return &Node{sys: NewSystem(log), log: log, out: make(chan struct{})}
}

// System is the node's actor system, for its hub's runtime
// (app.Options.System): the sessions' actors are the cluster's grains.
func (n *Node) System() *actor.ActorSystem { return n.sys.ActorSystem }

// Join makes the node, which hosts hub's sessions (their cwds in roots)
// for the clients of tokens (owner → token: serve.tokens, the same on
// every node), a member; that takes protoactor a second or more; the node
// is ready once it sees itself among the members.
func (n *Node) Join(hub *protocol.Hub, roots []string, tokens map[string]string, cfg *configs.Config, reg prometheus.Registerer) error {
	owners := NewOwners(tokens)
	n.host = NewHost(hub, roots, owners, n.log)
	m, err := Start(Options{Config: cfg.Cluster, Kinds: []*cluster.Kind{n.host.Kind()}, Log: n.log, Registry: reg, System: n.sys})
	if err != nil {
		return err
	}
	owners.Here(m.Address())
	n.host.Watch(m)
	if c := m.CountedOut(); c != nil {
		go func() {
			var why string
			select {
			case why = <-c:
			case <-m.gone:
				return // left
			}
			n.why.Store(&why)
			n.log.Error(fmt.Sprintf("cluster: %s; this node is no member any more and cannot be one again under its id: it is not ready, and starts again to rejoin", why))
			n.outOnce.Do(func() { close(n.out) })
		}()
	}
	switch {
	case !cfg.Sessions.Enabled:
		n.log.Warn("cluster: sessions.enabled is false: a session lives only as long as its node; set it, with store.url, so that sessions move when a node is lost or leaves (docs/cluster.md)")
	case cfg.Store.URL == "":
		n.log.Warn("cluster: sessions are kept in files, whose saves are not fenced: two copies of a session (a frozen node, a partition) can both save; store.url (Postgres) fences every save (docs/cluster.md)")
	}
	// A request is tried until a lost node has left the membership and a
	// leaving one has drained and gone: then its session has a new place.
	budget := cfg.Cluster.FailureTimeout + cfg.Serve.DrainTimeout + 10*time.Second
	n.edge.Store(NewEdge(m, hub, owners, budget, n.log))
	n.m.Store(m)
	return nil
}

// Ready is /readyz's: a node serves once it is a member, and until the
// cluster counted it out.
func (n *Node) Ready() bool {
	m := n.m.Load()
	return m != nil && m.Joined() && n.why.Load() == nil
}

// Rejoin is closed once the cluster counted this node out for good (after
// a partition healed, or a freeze): protoactor never lets its id back in,
// so mm serve drains and starts again, a new member (docs/cluster.md).
func (n *Node) Rejoin() <-chan struct{} { return n.out }

// Forward makes the Forwarder of a connection of owner. Connections are
// let in only once the node is ready, so the edge exists by then.
func (n *Node) Forward(owner string) protocol.NewForwarder {
	if e := n.edge.Load(); e != nil {
		return e.Forwarder(owner)
	}
	return nil
}

// Drain takes no new work from other nodes' clients and waits for the
// turns running here, until ctx ends and they are cancelled.
func (n *Node) Drain(ctx context.Context) {
	if n.host != nil {
		n.host.Drain(ctx)
	}
}

// Leave ends what this node serves for other nodes' clients (their
// sessions stay in the store, to be reopened elsewhere) and leaves the
// cluster, within timeout.
func (n *Node) Leave(timeout time.Duration) {
	if n.host != nil {
		n.host.Close()
	}
	if m := n.m.Load(); m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		m.Leave(ctx)
	}
}
