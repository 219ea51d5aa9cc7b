package grains

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/configs"
)

// Options configures Start.
type Options struct {
	// Config is the cluster block; its Name must be set.
	Config configs.Cluster
	// Kinds are the grain kinds this member hosts.
	Kinds []*cluster.Kind
	// Log receives protoactor's warnings and errors and the member's own
	// lines (joins, leaves); nil discards them. Nothing goes to stdout.
	Log *slog.Logger
	// Registry receives the cluster's metrics (metrics.go); nil leaves
	// them out.
	Registry prometheus.Registerer
	// System is the actor system to join with, the node's (NewSystem):
	// its runtime's sessions are the grains. nil: one of its own.
	System *System
}

// nodeTLS is a node's mutual TLS (cluster.tls): its servers' config and
// its clients'.
type nodeTLS struct{ server, client *tls.Config }

// System is a node's actor system: the one its runtime runs the sessions
// in (actors.Options.System) and its member joins the cluster with, so
// that a session's actor is its grain. Its protoactor lines go through
// protoLog.
type System struct {
	*actor.ActorSystem
	member atomic.Pointer[Member]
}

// NewSystem makes a node's actor system, logging on log.
func NewSystem(log *slog.Logger) *System {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &System{}
	plog := protoLog(log, &s.member)
	s.ActorSystem = actors.NewSystem(log, actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return plog }))
	return s
}

// Member is this process as a member of the mm cluster.
type Member struct {
	cfg      configs.Cluster
	log      *slog.Logger
	sys      *actor.ActorSystem
	c        *cluster.Cluster
	provider *providerHandle
	metrics  *metrics
	kinds    []string // the names of Options.Kinds

	started atomic.Bool // StartMember has returned
	// stream takes what the links of other nodes send this node's
	// edges, and writes what this node's links send theirs (stream.go);
	// nil with cluster.streamPort -1.
	stream *stream
	// streamAt is where each node takes prompts sent straight (remote
	// address to stream address), as its Accepted said.
	streamAt sync.Map
	leaving  atomic.Bool // Leave has begun; see log.go

	// edges are this process's client connections (*edgeConn), by the
	// edge's PID id: a link to one of them hands it what its
	// sessions write there and then (link.send).
	edges sync.Map

	// loads is what the gossip last said of the other members' loads
	// (balanced placement: load.go); loadGone is closed when gossipLoad
	// has returned.
	loads    atomic.Pointer[loadView]
	loadGone chan struct{}

	mu       sync.Mutex
	live     []string // addresses, sorted, as the last topology had them
	liveIDs  map[string]bool
	places   *cluster.Rendezvous // the live members, as protoactor's disthash places a grain among them
	placed   string              // this node's address in places ("" while it is not a member)
	hosts    map[string]string   // the live members' hosts, by id
	goneIDs  map[string]bool     // the members counted out: protoactor blocks them for good
	left     []string            // addresses gone since the handlers were last called
	changed  bool                // a topology arrived since the handlers were last called
	handlers []*handler
	next     chan struct{} // closed, and replaced, by the next topology (Changed)
	wake     chan struct{} // cap 1: the dispatcher has something to deliver
	done     chan struct{} // closed by Leave: the dispatcher returns
	gone     chan struct{} // closed when the dispatcher has returned
	leave    sync.Once
}

type handler struct {
	f     func(live, left []string)
	fresh bool // not yet called: its first call is the members as they are
}

// endpointQueue is the first size of the queue of messages to one member
// (it doubles when full).
const endpointQueue = 4096

// Start starts an actor system with remote on Config.Advertise, the
// configured provider, the disthash identity lookup and the given kinds,
// and returns once protoactor's StartMember has returned (about a second:
// it waits that long for the first topology). Joined says when this node
// has seen itself a member.
func Start(o Options) (*Member, error) {
	cfg := o.Config
	if !cfg.Enabled() {
		return nil, errors.New("grains: cluster.name is empty")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	host, portText, err := net.SplitHostPort(cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("cluster.advertise: %w", err)
	}
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("cluster.advertise: no host, and no hostname: %w", err)
		}
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("cluster.advertise: %w", err)
	}
	// configs refuses a cluster without cluster.tls; a Config built in
	// code is held to the same rule: on loopback too, every program of
	// the machine (a tenant's command among them) reaches the port.
	if !cfg.TLS.Enabled() {
		return nil, errors.New("cluster.tls: " + configs.ClusterTLSNeeded)
	}
	server, client, err := clustertls.Load(cfg.TLS)
	if err != nil {
		return nil, err
	}
	tlsc := &nodeTLS{server: server, client: client}
	m := &Member{cfg: cfg, log: log, next: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}), gone: make(chan struct{})}
	if cfg.StreamPort >= 0 {
		if m.stream, err = listenStream(m, host, cfg.StreamPort, tlsc, cfg.FailureTimeout, log); err != nil {
			return nil, err
		}
	}
	for _, k := range o.Kinds {
		m.kinds = append(m.kinds, k.Kind)
	}
	sys := o.System
	if sys == nil {
		sys = NewSystem(log)
	}
	sys.member.Store(m)
	m.sys = sys.ActorSystem
	m.provider, err = newProvider(cfg, host, m.sys, tlsc, m.sys.Logger(), log)
	if err != nil {
		m.sys.Shutdown()
		m.closeStream()
		return nil, err
	}
	// The member follows the topology from the moment the provider starts,
	// after the identity lookup, which subscribed earlier in StartMember:
	// each topology reaches the lookup first, so that once Joined says yes
	// the lookup places grains with that topology, and whoever read it
	// from the member reads it after the lookup took it.
	if m.provider.setView != nil {
		m.provider.setView(m.view)
	}
	provider := startHook{ClusterProvider: m.provider.p, before: func() {
		m.sys.EventStream.Subscribe(func(evt any) {
			if t, ok := evt.(*cluster.ClusterTopology); ok {
				m.onTopology(t)
			}
		})
	}}
	// Nodes authenticate each other before any message is read: the
	// remote's gRPC server takes only a client certificate the cluster's
	// CA signed, and a node dials only a server with one.
	rc := remote.Configure(host, port,
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(tlsc.server)),
			grpc.InitialWindowSize(grpcWindow), grpc.InitialConnWindowSize(grpcWindow)),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(tlsc.client)),
			grpc.WithInitialWindowSize(grpcWindow), grpc.WithInitialConnWindowSize(grpcWindow)),
		// The queue of what waits to be sent to a member grows as it
		// must (a ring that doubles); protoactor's default starts it at a
		// million slots, 16 MB a member, which a node touches page after
		// page as messages go round it and keeps for its life.
		remote.WithEndpointWriterQueueSize(endpointQueue))
	// The remote tries to connect to a member this many times, 2 s apart,
	// before it gives the endpoint up, blocking that endpoint (and a
	// leave) meanwhile: as long as the failure timeout, and no longer.
	rc.MaxRetryCount = max(1, int(cfg.FailureTimeout/(2*time.Second)))
	m.c = cluster.New(m.sys, cluster.Configure(cfg.Name, provider, disthash.New(), rc,
		cluster.WithKinds(o.Kinds...),
		// A member whose gossip heartbeat is older than this is blocked
		// (and never let back under its id), whatever the provider says.
		cluster.WithHeartbeatExpiration(cfg.FailureTimeout)))
	go m.dispatch()
	if err := startMember(m.c); err != nil {
		m.provider.close()
		m.sys.Shutdown()
		m.closeStream()
		close(m.done)
		<-m.gone
		return nil, err
	}
	m.started.Store(true)
	// Every node gossips its load, whatever its own placement, so that
	// the balanced nodes of a cluster count every member's sessions.
	m.loadGone = make(chan struct{})
	go m.gossipLoad()
	log.Info(fmt.Sprintf("cluster %s: member at %s (%s), stream at %s", cfg.Name, m.sys.Address(), cfg.Provider, cmp.Or(m.streamAddr(), "none")))
	if o.Registry != nil {
		m.metrics = newMetrics(o.Registry, m)
	}
	return m, nil
}

// startHook is a provider that calls before as it starts the member.
type startHook struct {
	cluster.ClusterProvider
	before func()
}

func (h startHook) StartMember(c *cluster.Cluster) error {
	h.before()
	return h.ClusterProvider.StartMember(c)
}

// startMember is StartMember with its panics (a remote port taken, a
// provider that cannot register) as errors.
func startMember(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: cannot start this member: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

// Cluster is protoactor's cluster: Request, Get, the member list.
func (m *Member) Cluster() *cluster.Cluster { return m.c }

// System is the actor system the kinds' grains run in.
func (m *Member) System() *actor.ActorSystem { return m.sys }

// Address is this member's remote address, host:port, as the others see
// it in Members and in the PIDs of its grains.
func (m *Member) Address() string { return m.sys.Address() }

// view is who this member counts and whom it counted out, by id, as its
// topologies said: mm's record, read under its lock (protoactor's own
// block list is read without one).
func (m *Member) view() (live, gone []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.liveIDs {
		live = append(live, id)
	}
	for id := range m.goneIDs {
		gone = append(gone, id)
	}
	slices.Sort(live)
	slices.Sort(gone)
	return live, gone
}

// CountedOut receives, once, why the cluster counted this node out for
// good, so that it must start again (a new id) to be a member again; nil
// with a provider that does not tell (only mm's automanaged does).
func (m *Member) CountedOut() <-chan string { return m.provider.countedOut }

// Joined says whether this node is a member: Start has returned and the
// last topology lists this node. On Kubernetes a pod is listed only once
// it is ready, so there Joined is true once Start has returned: readiness
// cannot wait for what readiness gives.
func (m *Member) Joined() bool {
	if !m.started.Load() || m.leaving.Load() {
		return false
	}
	if m.cfg.Provider == "k8s" {
		return true
	}
	return m.isMember(m.sys.Address())
}

// isMember says whether addr is a live member's address.
func (m *Member) isMember(addr string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, found := slices.BinarySearch(m.live, addr)
	return found
}

// isMemberID says whether id is a live member's id.
func (m *Member) isMemberID(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveIDs[id]
}

// Members returns the addresses (host:port) of the live members, this one
// included once joined, sorted.
func (m *Member) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.live)
}

// placeTries bounds the ids NewSessionID draws: with n members, each
// lands here with odds 1/n, so 64 draws all miss on three members once in
// 10^11 sessions. Such a session is spread, as it would have been.
const placeTries = 64

// NewSessionID is the id of a session a client of this node opens. With
// cluster.placement local, and with balanced while this node holds no
// more than its share of the sessions (load.go), it is one that
// protoactor's identity lookup (disthash: rendezvous hashing of the id
// over the live members, the same table it keeps) places on this node, so
// that the session's turns cross no node; any id otherwise, or while this
// node is not a member, or is leaving.
func (m *Member) NewSessionID() string {
	id, here := m.newSessionID()
	if m.metrics != nil {
		where := "any"
		if here {
			where = "here"
		}
		m.metrics.placed.WithLabelValues(where).Inc()
	}
	return id
}

// newSessionID is NewSessionID's id, and whether it places the session
// here (drawn so).
func (m *Member) newSessionID() (string, bool) {
	id := actors.NewSessionID(time.Now())
	switch m.cfg.Placement {
	case configs.PlacementLocal:
	case configs.PlacementBalanced:
		if v := m.loads.Load(); v != nil && !v.keep {
			return id, false
		}
	default:
		return id, false
	}
	m.mu.Lock()
	places, self := m.places, m.placed
	m.mu.Unlock()
	if self == "" || m.leaving.Load() {
		return id, false // not a member, or leaving: its sessions go to the others
	}
	for range placeTries {
		if places.GetByClusterIdentity(&cluster.ClusterIdentity{Kind: SessionKind, Identity: id}) == self {
			return id, true
		}
		id = actors.NewSessionID(time.Now())
	}
	return id, false
}

// Changed is closed when the next topology arrives: what a retry that
// waits for a node to leave or to join waits on.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.next
}

// OnTopology calls f with the live members' addresses and those that left
// since f's previous call: first at once with the members as they are (and
// no left), then after every change. Calls come from one goroutine of the
// member's, one at a time and in order, never from inside protoactor, so f
// may call the cluster; while f runs, changes gather and the next call
// carries them all (left accumulates; live is the latest). A member
// restarted on the same address comes back under a new id: it can be in
// left and in live at once, and what ran on it before is gone. f is not
// called once Leave has begun.
func (m *Member) OnTopology(f func(live, left []string)) {
	m.mu.Lock()
	m.handlers = append(m.handlers, &handler{f: f, fresh: true})
	m.mu.Unlock()
	m.poke()
}

// onTopology records a topology. It runs inside protoactor's member list,
// under its lock: it must not block, nor call the cluster.
func (m *Member) onTopology(t *cluster.ClusterTopology) {
	live := make([]string, 0, len(t.Members))
	for _, mb := range t.Members {
		live = append(live, mb.Address())
	}
	slices.Sort(live)
	live = slices.Compact(live)
	ids := make(map[string]bool, len(t.Members))
	hosts := make(map[string]string, len(t.Members))
	for _, mb := range t.Members {
		ids[mb.Id] = true
		hosts[mb.Id] = mb.Host
	}
	places := cluster.NewRendezvous()
	places.UpdateMembers(t.Members)
	placed := ""
	for _, mb := range t.Members {
		// By its id, the actor system's, as the gossip knows it (on
		// Kubernetes, the id this node labels its pod with first:
		// provider_k8s.go).
		if mb.Id == m.sys.ID {
			placed = mb.Address()
		}
	}
	m.mu.Lock()
	m.live, m.liveIDs, m.hosts, m.places, m.placed = live, ids, hosts, places, placed
	for _, mb := range t.Left {
		m.left = append(m.left, mb.Address())
		if m.goneIDs == nil {
			m.goneIDs = map[string]bool{}
		}
		m.goneIDs[mb.Id] = true
	}
	m.changed = true
	close(m.next)
	m.next = make(chan struct{})
	m.mu.Unlock()
	if len(t.Joined) > 0 || len(t.Left) > 0 {
		m.log.Info(fmt.Sprintf("cluster %s: %d member(s) %v; joined %v, left %v", m.cfg.Name, len(live), live, addresses(t.Joined), addresses(t.Left)))
	}
	m.poke()
}

func addresses(ms []*cluster.Member) []string {
	out := make([]string, len(ms))
	for i, mb := range ms {
		out[i] = mb.Address()
	}
	return out
}

func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// dispatch calls the OnTopology handlers, until Leave.
func (m *Member) dispatch() {
	defer close(m.gone)
	for {
		select {
		case <-m.done:
			return
		case <-m.wake:
		}
		m.mu.Lock()
		live, left, changed := slices.Clone(m.live), m.left, m.changed
		m.left, m.changed = nil, false
		type call struct {
			f    func(live, left []string)
			left []string
		}
		var calls []call
		for _, h := range m.handlers {
			switch {
			case h.fresh:
				h.fresh = false
				calls = append(calls, call{h.f, nil})
			case changed:
				calls = append(calls, call{h.f, left})
			}
		}
		m.mu.Unlock()
		for _, c := range calls {
			if m.leaving.Load() {
				return
			}
			c.f(live, slices.Clone(c.left))
		}
	}
}

// Leave leaves the cluster gracefully: this member tells the others it is
// going (gossip), its grains stop, its provider deregisters it, and its
// remote stops once what it was sending is sent. protoactor takes a few
// seconds (it waits 2 s for ownership to move); Leave returns when that
// is done or ctx ends, whichever is first. Later calls return at once.
func (m *Member) Leave(ctx context.Context) {
	m.leave.Do(func() {
		m.leaving.Store(true)
		close(m.done)
		<-m.gone
		m.log.Info(fmt.Sprintf("cluster %s: leaving", m.cfg.Name))
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			// The load's last read of the gossip may wait for its
			// actor: within ctx's bound, as the rest.
			<-m.loadGone
			m.shutdown()
			m.provider.close()
			m.closeStream()
		}()
		select {
		case <-done:
			m.log.Info(fmt.Sprintf("cluster %s: left, in %s", m.cfg.Name, time.Since(start).Round(time.Millisecond)))
		case <-ctx.Done():
			m.log.Warn(fmt.Sprintf("cluster %s: still leaving after %s; going anyway", m.cfg.Name, time.Since(start).Round(time.Millisecond)))
		}
	})
}

// closeStream closes this node's stream, if it has one.
func (m *Member) closeStream() {
	if m.stream != nil {
		m.stream.Close()
	}
}

// streamAddr is where the other nodes' links send this node's edges
// their Outs (Conn.stream); "" without a stream.
func (m *Member) streamAddr() string {
	if m.stream == nil {
		return ""
	}
	return m.stream.Addr()
}

// trustedStream is where the member at address takes its stream, as a
// message from the wire names it (Conn.stream): "" unless address is a
// live member's and stream is on its host, so that no message makes this
// node dial anything but a member.
func (m *Member) trustedStream(address, stream string) string {
	host, _, err := net.SplitHostPort(address)
	shost, port, err2 := net.SplitHostPort(stream)
	if stream == "" || err != nil || err2 != nil || shost != host || !m.isMember(address) {
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return ""
	}
	return stream
}

// streamTo is the connection to the stream of the node at address, if
// that node told its stream and the connection is up; nil otherwise, and
// then it is dialed for the next prompt.
func (m *Member) streamTo(address string) *streamPeer {
	if m.stream == nil {
		return nil
	}
	at, ok := m.streamAt.Load(address)
	if !ok {
		return nil
	}
	return m.stream.peerNow(at.(string))
}

// shutdown stops protoactor's cluster and remote. When peers leave at the
// same moment, protoactor's remote can panic while stopping (its endpoint
// manager signals a reader whose peer has just closed it: "send on closed
// channel"); the member is gone by then, and the node goes on leaving.
func (m *Member) shutdown() {
	defer func() {
		if r := recover(); r != nil {
			m.log.Warn(fmt.Sprintf("cluster %s: protoactor's remote failed while stopping (%v); leaving anyway", m.cfg.Name, r))
		}
	}()
	m.c.Shutdown(true)
}

// grpcWindow is the flow-control window of the streams between members:
// set, it turns gRPC's bandwidth estimator off, whose pings answered each
// burst of data with a write of their own.
const grpcWindow = 4 << 20
