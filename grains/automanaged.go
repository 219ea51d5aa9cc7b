package grains

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/mm-agent/mm/configs"
)

// automanaged is mm's automanaged provider: every node serves its health
// endpoint (GET /_health: who it is, where its remote listens, its kinds)
// and polls its peers' (cluster.peers, itself included) four times in
// cluster.failureTimeout; the nodes that answer, with this cluster's name,
// are the members. It is protoactor's automanaged provider made mm's for
// what protoactor's does not do: with cluster.tls, the endpoint is HTTPS
// and takes only a member's certificate, and a peer is polled only over a
// connection whose certificate the cluster's CA signed — a stranger that
// answers at a peer's address (one that took a stopped member's port) is
// no member and attracts no grain. It listens on the advertised host only,
// writes nothing on stdout, and a taken port fails Start.
type automanaged struct {
	cfg    configs.Cluster
	sys    *actor.ActorSystem
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	client *http.Client
	scheme string
	hosts  []string
	seen   *seen

	// out receives, once, why the cluster counted this node out for good
	// (countedOut).
	out     chan string
	outOnce sync.Once
	// view is the member's view of who is live and who was counted out
	// (Member.view), for the health endpoint and countedOut.
	view atomic.Pointer[func() (live, gone []string)]

	mu      sync.Mutex
	c       *cluster.Cluster
	stopped bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// healthNode is what a node's health endpoint answers.
type healthNode struct {
	ID          string   `json:"id"`
	Address     string   `json:"address"`
	Port        int      `json:"port"`
	HealthPort  int      `json:"auto_manage_port"`
	Kinds       []string `json:"kinds"`
	ClusterName string   `json:"cluster_name"`
	// Members are the ids of the members this node counts; Blocked those
	// it counted out (protoactor never lets them back in): what a peer
	// needs to know that it was counted out (countedOut).
	Members []string `json:"members,omitempty"`
	Blocked []string `json:"blocked,omitempty"`
}

// healthTimeout bounds one poll of a peer: a host that swallows packets
// costs this much more than one that refuses.
const healthTimeout = 2 * time.Second

func newAutomanaged(cfg configs.Cluster, host string, sys *actor.ActorSystem, tlsc *nodeTLS, log *slog.Logger) (*providerHandle, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.HealthPort)))
	if err != nil {
		return nil, fmt.Errorf("cluster.healthPort: %w", err)
	}
	self := ln.Addr().(*net.TCPAddr)
	p := &automanaged{cfg: cfg, sys: sys, log: log, ln: ln, scheme: "http", hosts: []string{self.String()},
		seen: &seen{keys: map[string]*seenKey{}}, stop: make(chan struct{}), done: make(chan struct{}), out: make(chan string, 1)}
	for _, peer := range cfg.Peers {
		if !isSelf(peer, self) {
			p.hosts = append(p.hosts, peer)
		}
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: healthTimeout}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     time.Minute,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_health", p.health)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: healthTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if tlsc != nil {
		p.scheme = "https"
		transport.TLSClientConfig = tlsc.client
		p.ln = tls.NewListener(ln, tlsc.server)
	}
	p.client = &http.Client{Transport: transport, Timeout: healthTimeout,
		// A peer's endpoint answers; it never sends the poll elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &providerHandle{p: p, close: p.close, countedOut: p.out,
		setView: func(v func() (live, gone []string)) { p.view.Store(&v) }}, nil
}

// health answers a peer's poll: this node, once its remote listens.
func (p *automanaged) health(w http.ResponseWriter, _ *http.Request) {
	host, port, err := p.sys.GetHostPort()
	p.mu.Lock()
	c := p.c
	p.mu.Unlock()
	if err != nil || c == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	live, gone := p.members()
	_ = json.NewEncoder(w).Encode(healthNode{ID: p.sys.ID, Address: host, Port: port, HealthPort: p.cfg.HealthPort,
		Kinds: c.GetClusterKinds(), ClusterName: p.cfg.Name, Members: live, Blocked: gone})
}

func (p *automanaged) StartMember(c *cluster.Cluster) error {
	p.mu.Lock()
	p.c = c
	p.mu.Unlock()
	go func() { _ = p.srv.Serve(p.ln) }()
	go p.poll()
	return nil
}

func (p *automanaged) StartClient(c *cluster.Cluster) error {
	p.mu.Lock()
	p.c = c
	p.mu.Unlock()
	go p.poll()
	return nil
}

func (p *automanaged) Shutdown(bool) error {
	p.close()
	return nil
}

// close stops the polls and the endpoint; it is idempotent.
func (p *automanaged) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.stopped = true
		started := p.c != nil
		p.mu.Unlock()
		close(p.stop)
		_ = p.srv.Close()
		_ = p.ln.Close()
		if started {
			<-p.done
		}
		p.client.CloseIdleConnections()
	})
}

// poll polls the peers until the provider stops, and hands protoactor the
// members each round found.
func (p *automanaged) poll() {
	defer close(p.done)
	every := p.cfg.FailureTimeout / 4
	for {
		p.round()
		select {
		case <-p.stop:
			return
		case <-time.After(every):
		}
	}
}

// round polls every peer at once and updates the topology with those that
// answered as members of this cluster; when none did (this node's own
// endpoint included, which is not yet serving), the topology is left.
func (p *automanaged) round() {
	nodes := make([]*healthNode, len(p.hosts))
	var wg sync.WaitGroup
	for i, host := range p.hosts {
		wg.Go(func() { nodes[i] = p.check(host) })
	}
	wg.Wait()
	var members []*cluster.Member
	for _, n := range nodes {
		if n != nil && n.ClusterName == p.cfg.Name && n.ID != "" {
			members = append(members, &cluster.Member{Id: n.ID, Host: n.Address, Port: int32(n.Port), Kinds: n.Kinds})
		}
	}
	p.mu.Lock()
	c, stopped := p.c, p.stopped
	p.mu.Unlock()
	if len(members) == 0 || stopped {
		return
	}
	c.MemberList.UpdateClusterTopology(members)
	live, gone := p.members()
	for _, n := range nodes {
		if n != nil && n.ClusterName == p.cfg.Name {
			if why := countedOut(p.sys.ID, live, gone, n); why != "" {
				p.outOnce.Do(func() { p.out <- why })
			}
		}
	}
}

// members is the member's view (Member.view); none before it is set.
func (p *automanaged) members() (live, gone []string) {
	if v := p.view.Load(); v != nil {
		return (*v)()
	}
	return nil, nil
}

// countedOut says why node self, which counts the members live and has
// counted out blocked, must start again to be a member again, seeing peer
// n answer: "" when it need not. protoactor counts a member that stopped
// answering out for good (its id is blocked, and it is never let back in,
// here or through the gossip). When a partition heals, or a frozen node
// thaws, both sides answer again, each with the other blocked: two
// clusters of one name, each placing sessions. The side that must start
// again (a new id, which nobody blocked) is:
//   - the one counted out by a peer it did not count out itself (it was
//     away, frozen or cut off, while the others went on);
//   - else, both having counted the other out, the smaller side (fewer
//     members), and of two sides of one size the one whose smallest
//     member id is the larger, so that exactly one side starts again.
func countedOut(self string, live, blocked []string, n *healthNode) string {
	if n.ID == self || !slices.Contains(n.Blocked, self) {
		return ""
	}
	why := fmt.Sprintf("the member %s (at %s:%d) counted this node out, ", n.ID, n.Address, n.Port)
	switch {
	case !slices.Contains(blocked, n.ID):
		return why + "while this node was away (frozen or cut off)"
	case len(live) < len(n.Members):
		return why + fmt.Sprintf("as this node did it, during a partition: its side has %d members, this one %d", len(n.Members), len(live))
	case len(live) == len(n.Members) && len(live) > 0 && slices.Min(live) > slices.Min(n.Members):
		return why + fmt.Sprintf("as this node did it, during a partition: the sides are of %d members each, and the other one keeps its place", len(live))
	}
	return ""
}

// check polls one peer's health endpoint; nil when it does not answer as
// a member would. A peer that stays silent is warned of once a minute
// from the first poll on (the member's own line says when it left).
func (p *automanaged) check(host string) *healthNode {
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	url := p.scheme + "://" + host + "/_health"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := p.client.Do(req)
	var n healthNode
	if err == nil {
		defer resp.Body.Close()
		switch {
		case resp.StatusCode != http.StatusOK:
			err = fmt.Errorf("status %s", resp.Status)
		default:
			// A member's answer is a few hundred bytes; a peer is not
			// read past 64 KiB.
			err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&n)
		}
	}
	if err != nil {
		if !p.isStopped() && !errors.Is(ctx.Err(), context.Canceled) && p.seen.warn("health "+url, 0, p.cfg.FailureTimeout) {
			p.log.Warn(fmt.Sprintf("cluster: the health endpoint %s does not answer as a member: %v", url, err))
		}
		return nil
	}
	return &n
}

func (p *automanaged) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}
