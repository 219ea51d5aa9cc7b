package stress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mm-agent/mm/clustertls"
)

// A cluster of served mm (-serve MMBIN -nodes N): N `mm serve` processes
// on loopback join one protoactor cluster (cluster.name mmstress, the
// automanaged provider, each naming every node's health endpoint on a port
// picked here, its remote on a free port). They share the run's folder as
// their dir and serve.roots, as the nodes of a real cluster share a
// volume: the sessions' cwds and their files, and the cluster's
// certificates (cluster.tls, made for the run as `mm cluster-certs` makes
// them, in cluster-certs). Each has its own config (node<i>.yaml); all
// have the run's token. The run's connections go
// round-robin to the nodes, but for the one -kill-node kills, the last:
// it only hosts the grains the cluster places there, so that its death
// loses turns but no connection.

// clusterName is the cluster.name of the run's nodes.
const clusterName = "mmstress"

// startServeProcs starts the run's `mm serve`: one as ever, or c.Nodes
// as one cluster.
func startServeProcs(ctx context.Context, c *Config, dir, marker, token string) ([]*serveProc, error) {
	if c.Nodes <= 1 {
		cfgPath, err := writeConfig(c, dir, serveConfig(c, dir))
		if err != nil {
			return nil, err
		}
		p, err := startServeProc(ctx, c.Serve, cfgPath, dir, marker, token)
		if err != nil {
			return nil, err
		}
		return []*serveProc{p}, nil
	}
	if _, err := writeConfig(c, dir, serveConfig(c, dir)); err != nil { // the script, and a config for the record
		return nil, err
	}
	health, err := freePorts(c.Nodes)
	if err != nil {
		return nil, err
	}
	var peers []string
	for _, p := range health {
		peers = append(peers, strconv.Quote(net.JoinHostPort("127.0.0.1", strconv.Itoa(p))))
	}
	certs := filepath.Join(dir, "cluster-certs")
	if err := clustertls.Generate(certs, 24*time.Hour); err != nil {
		return nil, fmt.Errorf("the cluster's certificates: %w", err)
	}
	tls := fmt.Sprintf("  tls:\n    cert: %q\n    key: %q\n    ca: %q\n", filepath.Join(certs, clustertls.CertFile),
		filepath.Join(certs, clustertls.KeyFile), filepath.Join(certs, clustertls.CAFile))
	base := mmConfig(c, filepath.Join(dir, "script.yaml")) + serveConfig(c, dir)
	procs := make([]*serveProc, c.Nodes)
	errs := make([]error, c.Nodes)
	var wg sync.WaitGroup
	for i := range c.Nodes {
		cluster := fmt.Sprintf("cluster:\n  name: %s\n  advertise: 127.0.0.1:0\n  peers: [%s]\n  healthPort: %d\n  failureTimeout: %s\n%s",
			clusterName, strings.Join(peers, ", "), health[i], c.FailureTimeout, tls)
		if placement := c.placement(); placement != "" {
			cluster += "  placement: " + placement + "\n"
		}
		cfgPath := filepath.Join(dir, fmt.Sprintf("node%d.yaml", i))
		if err := os.WriteFile(cfgPath, []byte(base+cluster), 0o644); err != nil {
			return nil, err
		}
		// Started together: each joins while the others start.
		wg.Go(func() { procs[i], errs[i] = startServeProc(ctx, c.Serve, cfgPath, dir, marker, token) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range procs {
			if p != nil {
				_ = p.stop()
			}
		}
		return nil, err
	}
	return procs, nil
}

// freePorts returns n ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// placement is the run's cluster.placement: -placement, else spread for
// -kill-node (the killed node must hold sessions), else none (mm's
// default).
func (c Config) placement() string {
	if c.Placement == "" && c.KillNode > 0 {
		return "spread"
	}
	return c.Placement
}

// joinTimeout bounds how long the run waits for its nodes to form the
// cluster; protoactor takes a second or more.
var joinTimeout = time.Minute // a var: a test shortens it

// waitCluster waits until every node is ready (/readyz answers 200) and
// counts n members.
func (s *server) waitCluster(ctx context.Context, n int) error {
	deadline := time.Now().Add(joinTimeout)
	for i, nd := range s.nodes {
		for {
			ready, members := s.readyz(ctx, nd), -1.0
			if ready {
				if m, err := s.scrape(ctx, nd); err == nil {
					members = m[metricMembers]
				}
			}
			if ready && int(members) == n {
				break
			}
			if time.Now().After(deadline) {
				msg := fmt.Sprintf("node %d of %d not ready with %d members within %v (ready %t, members %v)", i, n, n, joinTimeout, ready, members)
				if nd.proc != nil {
					msg += ":\n" + nd.proc.tail.String()
				}
				return errors.New(msg + s.others(ctx, nd))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// others says how the nodes other than nd stand, and the end of the log
// of each that exited: a node that does not see them all may be waiting
// for one that exited (one the others counted out starts again).
func (s *server) others(ctx context.Context, nd *node) string {
	var b strings.Builder
	for j, o := range s.nodes {
		if o == nd {
			continue
		}
		ready, members := s.readyz(ctx, o), -1.0
		if m, err := s.scrape(ctx, o); err == nil {
			members = m[metricMembers]
		}
		fmt.Fprintf(&b, "\nnode %d: ready %t, members %v", j, ready, members)
		if o.proc == nil {
			continue
		}
		select {
		case err := <-o.proc.exited:
			o.proc.exited <- err
			fmt.Fprintf(&b, ", exited (%v):\n%s", err, o.proc.tail)
		default:
		}
	}
	return b.String()
}

// readyz says whether node n's /readyz answers 200.
func (s *server) readyz(ctx context.Context, n *node) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(n.metrics, "/metrics")+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// grains is each node's count of session grains (mm_cluster_grains), -1
// for a node that does not say or was killed.
func (s *server) grains() []int {
	out := make([]int, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = -1
		if n.dead.Load() {
			continue
		}
		if m, err := s.scrape(context.Background(), n); err == nil {
			out[i] = int(m[metricGrains])
		} else {
			s.errs.add("metrics", err)
		}
	}
	return out
}

// kill ends the last node at once (SIGKILL) and returns its index.
func (s *server) kill() (int, error) {
	i := len(s.nodes) - 1
	n := s.nodes[i]
	if n.proc == nil {
		return i, errors.New("not a node the run started")
	}
	n.dead.Store(true)
	return i, n.proc.kill()
}
