package stress

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
)

// A served mm: the run's sessions are spread over N WebSocket connections
// to one `mm serve`, one JSON-RPC message per text frame (frameWire), with
// the same client and checks as over pipes. The server is already running
// (-url, -token) or started by the run (-serve MMBIN: `MMBIN serve -listen
// 127.0.0.1:0` with the run's config and a random token, stopped with
// SIGTERM at the end). Its memory and goroutines are read from its
// /metrics, which the token opens: the server may be on another host.

// server is the `mm serve` a run drives, or the nodes of one cluster.
type server struct {
	nodes []*node
	// takers is how many of the nodes, from the first, the connections go
	// to: all but the node -kill-node kills.
	takers int
	token  string
	http   *http.Client // for the upgrades and /metrics; its idle connections are closed at the end
	errs   *errorKinds
}

// node is one `mm serve` of the run.
type node struct {
	ws, metrics string
	proc        *serveProc // nil: not the run's own
	// dead is set once the run killed the node: it is read no more.
	dead atomic.Bool
	// cpu is the CPU time last read from the node, in ns: a killed
	// node's counts in the run's.
	cpu atomic.Int64
}

// Names of the server's figures on /metrics: the Prometheus client's
// process and Go collectors.
const (
	metricRSS        = "process_resident_memory_bytes"
	metricGoroutines = "go_goroutines"
	metricProcs      = "go_sched_gomaxprocs_threads"
	metricCPU        = "process_cpu_seconds_total"
	metricMembers    = "mm_cluster_members"
	metricGrains     = "mm_cluster_grains" // kind="session"
)

// keptGoroutines is how many goroutines mm serve keeps for reuse by
// design, whatever a run did, on a server with procs cores: its runtime's
// work pool keeps up to 64 idle goroutines (internal/gopool) and its
// dispatcher 2 workers per core, at least 4 (actors/dispatcher.go). What a
// run leaves beyond them grows with what it opened: a leak.
func keptGoroutines(procs int) int { return 64 + max(4, 2*procs) }

// serveConfig is what a served mm's config adds to the run's: its roots
// hold the sessions' cwds (the run's folder), and it takes every
// connection and every session the run opens (all under one token: past
// serve.maxSessionsPerToken, 256 by default, session/new is refused).
//
// Its sandbox is full, not mm serve's default workspace-write, which keeps
// tools.sensitive files read-only: the "ask" turn writes one, and must be
// asked about, not refused.
func serveConfig(c *Config, dir string) string {
	return fmt.Sprintf("serve:\n  roots: [%q]\n  maxConnections: %d\n  maxSessionsPerToken: %d\nsandbox:\n  mode: full\n",
		dir, max(256, c.Conns), max(256, c.Sessions))
}

// WriteServeConfig writes into dir the config and script of a served mm
// that a run of c drives with -url: the scripted model the checks expect,
// c's concurrency and persistence, dir as its only root (the run's -dir).
// It returns the config's path.
func WriteServeConfig(c Config, dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return writeConfig(&c, dir, serveConfig(&c, dir))
}

// startServed starts (-serve, -nodes) or reaches (-url) the server and
// opens the run's connections.
func startServed(ctx context.Context, c *Config, dir, marker string, cl *client, errs *errorKinds) (*fleet, error) {
	s := &server{token: c.Token, errs: errs, http: &http.Client{Transport: &http.Transport{}}}
	mode := "mm serve at " + c.URL
	urls := strings.Split(c.URL, ",")
	if len(urls) > 1 {
		mode = fmt.Sprintf("%d mm serve nodes at %s", len(urls), c.URL)
	}
	if c.Serve != "" {
		var b [24]byte
		_, _ = crand.Read(b[:])
		s.token = hex.EncodeToString(b[:])
		procs, err := startServeProcs(ctx, c, dir, marker, s.token)
		if err != nil {
			return nil, err
		}
		urls = nil
		for _, p := range procs {
			s.nodes = append(s.nodes, &node{proc: p})
			urls = append(urls, p.url)
		}
		c.URL = strings.Join(urls, ",")
		mode = "mm serve (" + c.Serve + ", started by the run)"
		if c.Nodes > 1 {
			mode = fmt.Sprintf("%d mm serve nodes as one cluster (%s, started by the run, placement %s)", c.Nodes, c.Serve, cmp.Or(c.placement(), "mm's default"))
		}
	} else {
		for range urls {
			s.nodes = append(s.nodes, &node{})
		}
	}
	s.takers = len(s.nodes)
	if c.KillNode > 0 {
		s.takers--
	}
	f, err := s.connect(ctx, c, urls, cl)
	if err != nil {
		_ = s.stop()
		return nil, err
	}
	f.mode = fmt.Sprintf("%s over %d WebSocket connection(s)", mode, len(f.agents))
	if s.takers < len(s.nodes) {
		f.mode += fmt.Sprintf(" to the first %d", s.takers)
	}
	return f, nil
}

// connect reads every node's figures before any connection, then opens
// the run's connections, round-robin over the nodes that take them (at
// least one each). The figures are the nodes' sums.
func (s *server) connect(ctx context.Context, c *Config, urls []string, cl *client) (*fleet, error) {
	for i, n := range s.nodes {
		u, err := url.Parse(strings.TrimSpace(urls[i]))
		if err != nil {
			return nil, fmt.Errorf("-url: %w", err)
		}
		n.ws = u.String()
		u.Scheme = strings.Replace(u.Scheme, "ws", "http", 1)
		u.Path, u.RawQuery = "/metrics", ""
		n.metrics = u.String()
	}
	if c.Nodes > 1 {
		if err := s.waitCluster(ctx, c.Nodes); err != nil {
			return nil, err
		}
	}
	// Read first: a wrong token or address fails here, plainly.
	goroutines0, kept := make([]int, len(s.nodes)), make([]int, len(s.nodes))
	var rss0 int64
	for i, n := range s.nodes {
		m0, err := s.scrape(ctx, n)
		if err != nil {
			return nil, err
		}
		rss0 += int64(m0[metricRSS])
		goroutines0[i], kept[i] = int(m0[metricGoroutines]), keptGoroutines(int(m0[metricProcs]))
	}
	memory := "mm serve's /metrics"
	if len(s.nodes) > 1 {
		memory = fmt.Sprintf("the sum of the %d nodes' /metrics", len(s.nodes))
	}
	if s.own() {
		memory = "mm serve's resident memory (/proc)"
		if len(s.nodes) > 1 {
			memory = fmt.Sprintf("the sum of the %d nodes' resident memory (/proc)", len(s.nodes))
		}
	}
	f := &fleet{memory: memory, rss: s.rss, cpu: s.cpu, rssStart: rss0, sample: 100 * time.Millisecond, stop: s.stop}
	f.goroutinesLeft = func() (int, int) { return s.goroutinesLeft(goroutines0, kept) }
	if len(s.nodes) > 1 {
		f.grains = s.grains
		f.kill = s.kill
	}
	conns := max(c.Conns, s.takers)
	for i := 0; i < conns; i++ {
		a, err := s.dial(ctx, s.nodes[i%s.takers], cl)
		if err != nil {
			for _, a := range f.agents {
				_ = a.close()
			}
			return nil, fmt.Errorf("connection %d of %d: %w", i+1, conns, err)
		}
		f.agents = append(f.agents, a)
	}
	return f, nil
}

// dial opens one WebSocket connection to node n.
func (s *server) dial(ctx context.Context, n *node, cl *client) (*agent, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, n.ws, &websocket.DialOptions{HTTPClient: s.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + s.token}}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%s: %s", n.ws, resp.Status)
		}
		return nil, err
	}
	conn := newClientConn(cl, frames(ws))
	return &agent{conn: conn, close: func() error {
		err := conn.close()
		<-conn.done
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			err = nil
		}
		return err
	}}, nil
}

// scrape reads the figures the run uses from node n's /metrics.
func (s *server) scrape(ctx context.Context, n *node) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.metrics, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", n.metrics, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", n.metrics, resp.Status)
	}
	m, err := parseMetrics(io.LimitReader(resp.Body, 16<<20))
	if err == nil {
		n.cpu.Store(int64(m[metricCPU] * float64(time.Second)))
	}
	return m, err
}

// scrapeLive reads every node the run has not killed; a failed read is
// counted as an error of the run (unless the node was killed meanwhile)
// and leaves the node out.
func (s *server) scrapeLive() []map[string]float64 {
	var out []map[string]float64
	for _, n := range s.nodes {
		if n.dead.Load() {
			continue
		}
		m, err := s.scrape(context.Background(), n)
		if err != nil {
			if !n.dead.Load() {
				s.errs.add("metrics", err)
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// parseMetrics reads the unlabelled gauges and counters the run uses from
// the Prometheus text format: the resident memory and the goroutines must
// be there; the cores and the CPU time may not (0), nor a cluster's
// members and session grains (-1: not a cluster node).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	out := map[string]float64{metricMembers: -1, metricGrains: -1}
	for _, name := range []string{metricRSS, metricGoroutines, metricProcs, metricCPU, metricMembers} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil && f.GetMetric()[0].GetCounter() == nil {
			if name != metricRSS && name != metricGoroutines {
				continue
			}
			return nil, fmt.Errorf("/metrics: no gauge %s", name)
		}
		m := f.GetMetric()[0]
		out[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	if f := fams[metricGrains]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "session" {
					out[metricGrains] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out, nil
}

// rss is the live nodes' resident memory now, summed. The run's own
// nodes' is read as the system counts it (/proc/<pid>/status, the figure
// their /metrics give), so that sampling it every 100 ms while the turns
// run costs the nodes nothing: a run of three nodes read their /metrics
// thirty times a second, about 5% of the nodes' CPU in a profile.
// A node the run did not start is read from its /metrics.
func (s *server) rss() int64 {
	if s.own() {
		var sum int64
		for _, n := range s.nodes {
			if !n.dead.Load() {
				sum += procStatus(n.proc.cmd.Process.Pid, "VmRSS")
			}
		}
		return sum
	}
	var sum int64
	for _, m := range s.scrapeLive() {
		sum += int64(m[metricRSS])
	}
	return sum
}

// own says whether the run started every node (-serve): their figures
// can be read from /proc.
func (s *server) own() bool {
	for _, n := range s.nodes {
		if n.proc == nil || n.proc.cmd.Process == nil {
			return false
		}
	}
	return len(s.nodes) > 0
}

// cpu is the CPU time the nodes have used, to their /metrics' precision
// (10 ms on Linux), summed; a killed node's as last read.
func (s *server) cpu() time.Duration {
	s.scrapeLive()
	var sum time.Duration
	for _, n := range s.nodes {
		sum += time.Duration(n.cpu.Load())
	}
	return sum
}

// goroutinesLeft waits for each live node's goroutines to wind down after
// the run's connections closed (windDown at most), and returns how many more
// there are than before they opened, summed over the nodes: those beyond
// what mm keeps (left), and those it may keep (at most kept per node).
func (s *server) goroutinesLeft(before, kept []int) (left, keeps int) {
	for i, n := range s.nodes {
		deadline := time.Now().Add(windDown)
		for !n.dead.Load() {
			m, err := s.scrape(context.Background(), n)
			if err != nil {
				s.errs.add("metrics", err)
				break
			}
			g := max(int(m[metricGoroutines])-before[i], 0)
			if g <= kept[i] || time.Now().After(deadline) {
				left, keeps = left+max(g-kept[i], 0), keeps+min(g, kept[i])
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return left, keeps
}

// stop ends the nodes the run started, if it did, one after another, and
// lets go of the HTTP client's idle connections.
func (s *server) stop() error {
	defer s.http.CloseIdleConnections()
	errs := make([]error, len(s.nodes))
	for i, n := range s.nodes {
		if n.proc != nil {
			errs[i] = n.proc.stop()
		}
	}
	return errors.Join(errs...)
}
