package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
)

// etcdEnv, set to 1, makes TestClusterOnEtcd fail where no etcd is found
// instead of skipping: .ci/run sets it after installing Debian's
// etcd-server.
const etcdEnv = "MM_REQUIRE_ETCD"

// consulEnv, set to 1, makes TestClusterOnConsul fail where no consul is
// found instead of skipping: .ci/run sets it once it has built Consul.
const consulEnv = "MM_REQUIRE_CONSUL"

// TestClusterOnEtcd runs two mm serve nodes with the etcd provider
// (protoactor's, in an mm-node built with -tags etcd) against a real etcd
// (in MM_CLUSTER_BIN, or on PATH): see clusterOnProvider.
func TestClusterOnEtcd(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	etcd := clusterProgram(t, "etcd", etcdEnv, "Debian: etcd-server")
	ports := freePorts(t, 2)
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	runProgram(t, etcd, "--data-dir", filepath.Join(t.TempDir(), "etcd"), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer)
	waitUntil(t, "etcd serving", func() bool { return httpOK(client + "/health") })
	clusterOnProvider(t, "etcd", fmt.Sprintf("  provider: etcd\n  etcd: {endpoints: [%q], prefix: /mm-test}\n", strings.TrimPrefix(client, "http://")))
}

// TestClusterOnConsul runs two mm serve nodes with the consul provider
// (protoactor's, in an mm-node built with -tags consul) against a real
// Consul agent in dev mode (a server of its own, on free ports): see
// clusterOnProvider. Consul 1.15.4 (MPL 2.0), in MM_CLUSTER_BIN or on
// PATH: scripts/cluster-bin.sh builds it (ONLY=consul for it alone).
// Then against one whose ACLs deny what no token allows, as a Consul in
// production does: the nodes take their token, which has only the rules
// docs/cluster.md names, from CONSUL_HTTP_TOKEN, which mm serve hands to
// mm-node.
func TestClusterOnConsul(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	consul := clusterProgram(t, "consul", consulEnv, "scripts/cluster-bin.sh builds it")
	t.Run("open", func(t *testing.T) {
		addr := startConsul(t, consul)
		clusterOnProvider(t, "consul", fmt.Sprintf("  provider: consul\n  consul: {address: %q}\n", addr))
	})
	t.Run("acl", func(t *testing.T) {
		management := "6f1d2c3b-0a9e-4d8c-b7a6-5e4f3d2c1b0a"
		// Its HTTP API also on a unix socket, as a local agent's often is.
		sock := filepath.Join(t.TempDir(), "consul.sock")
		addr := startConsul(t, consul, "acl {\n enabled = true\n default_policy = \"deny\"\n tokens { initial_management = \""+management+"\" }\n}",
			`addresses { http = "127.0.0.1 unix://`+sock+`" }`)
		lines := fmt.Sprintf("  provider: consul\n  consul: {address: %q}\n", addr)
		// The nodes' token has only the rules docs/cluster.md names:
		// service:write on the cluster's name (test), service:read and
		// node:read for the watch.
		consulPut(t, addr, management, "/v1/acl/policy", `{"Name": "mm-node", "Rules": "service \"test\" { policy = \"write\" }\nservice_prefix \"\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }"}`)
		var created struct{ SecretID string }
		if err := json.Unmarshal([]byte(consulPut(t, addr, management, "/v1/acl/token", `{"Policies": [{"Name": "mm-node"}]}`)), &created); err != nil || created.SecretID == "" {
			t.Fatalf("the nodes' token: %v %+v", err, created)
		}
		token := created.SecretID
		// A node without the token, through the socket, is refused. It
		// says so, and tries again, paced: protoactor's provider alone
		// tried again at once, about 2,000 times a second, each refusal
		// an error line (and through a socket mm's pacing was lost once:
		// the api package makes that client itself).
		refused := providerNodes(t, "consul", fmt.Sprintf("  provider: consul\n  consul: {address: %q}\n", "unix://"+sock))(0)
		const refusal = "Failed to register service to consul"
		waitUntil(t, "the node without a token refused", func() bool {
			return strings.Contains(refused.stderr.String(), refusal) && strings.Contains(refused.stderr.String(), "403 (Permission denied")
		})
		first := time.Now()
		waitUntil(t, "the node without a token trying again", func() bool {
			return strings.Count(refused.stderr.String(), refusal) >= 3
		})
		if wait := 2*time.Second - time.Since(first); wait > 0 {
			time.Sleep(wait) // what an unpaced provider fills with thousands of attempts
		}
		if n := strings.Count(refused.stderr.String(), refusal); n > 20 {
			t.Errorf("the node without a token tried %d times in %v", n, time.Since(first).Round(time.Millisecond))
		}
		if code := refused.readyz(t); code == http.StatusOK {
			t.Errorf("the node without a token says it is ready")
		}
		_ = refused.cmd.Process.Kill()
		clusterOnProvider(t, "consul", lines, "CONSUL_HTTP_TOKEN="+token)
	})
}

// consulPut is the body of Consul's answer 200 to a PUT of body at path,
// with token.
func consulPut(t *testing.T, addr, token, path, body string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Consul-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %s %v\n%s", path, res.Status, err, b)
	}
	return string(b)
}

// startConsul runs a Consul agent in dev mode on free ports, with hcl
// added to its config, and gives its HTTP API's address once it has
// elected itself leader.
func startConsul(t *testing.T, consul string, hcl ...string) string {
	ports := freePorts(t, 5)
	// disable_update_check: no call to HashiCorp's update service.
	args := []string{"agent", "-dev", "-hcl", "disable_update_check = true", "-node", "mm-test", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-data-dir", filepath.Join(t.TempDir(), "consul"),
		"-http-port", fmt.Sprint(ports[0]), "-server-port", fmt.Sprint(ports[1]),
		"-serf-lan-port", fmt.Sprint(ports[2]), "-serf-wan-port", fmt.Sprint(ports[3]),
		"-dns-port", fmt.Sprint(ports[4]), "-grpc-port", "-1", "-grpc-tls-port", "-1"}
	for _, h := range hcl {
		args = append(args, "-hcl", h)
	}
	runProgram(t, consul, args...)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	waitUntil(t, "consul's server elected", func() bool {
		res, err := httpGet("http://" + addr + "/v1/status/leader")
		return err == nil && strings.Trim(strings.TrimSpace(res), `"`) != ""
	})
	return addr
}

// clusterOnProvider runs two mm serve nodes with provider (its config
// lines: cluster.provider and its section), whose server runs: the nodes
// register there and find each other, and a session through node 0
// whose grain lives on node 1 answers; node 1 killed, node 0 counts it
// out once the provider does (a lease or a check that ends); node 1
// started again comes back as a new member, and a session placed on it
// answers.
func clusterOnProvider(t *testing.T, tag, lines string, env ...string) {
	start := providerNodes(t, tag, lines)
	nodes := []*node{start(0, env...), start(1, env...)}
	members := func(what string, n int) {
		for i, nd := range nodes {
			waitUntil(t, fmt.Sprintf("node %d ready with %d members %s", i, n, what), func() bool {
				return nd.readyz(t) == http.StatusOK && nd.members(t) == n
			})
		}
	}
	members("through "+tag, 2)
	c := &testCluster{nodes: nodes}
	ctx := testwait.Context(t)
	w := nodes[0].wire(t)
	project := nodes[0].project(t)
	far := c.sessionOn(t, ctx, w, project, "node 1", func(n int) bool { return n == 1 })
	if res, err := w.ask(ctx, far, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt through node 0 to a session on node 1: %v %v\nnode 0:\n%s\nnode 1:\n%s", res, err, nodes[0].stderr.String(), nodes[1].stderr.String())
	}

	// Killed, node 1 deregisters nothing: the provider lets it go.
	if err := nodes[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = nodes[1].waitExit(t, "node 1 killed")
	waitUntil(t, "node 0 counting node 1 out", func() bool { return nodes[0].members(t) == 1 })
	nodes[1] = start(1, env...)
	c.nodes[1] = nodes[1]
	members("after node 1 started again", 2)
	again := c.sessionOn(t, ctx, w, project, "node 1 started again", func(n int) bool { return n == 1 })
	if res, err := w.ask(ctx, again, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt through node 0 to a session on node 1 started again: %v %v\nnode 0:\n%s\nnode 1:\n%s", res, err, nodes[0].stderr.String(), nodes[1].stderr.String())
	}
}

// providerNodes builds mm and an mm-node with the provider's tag, and
// gives what starts node i of a cluster on that provider (lines: its
// config), with env added to its environment.
func providerNodes(t *testing.T, tag, lines string) func(i int, env ...string) *node {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := mmbuild.Build(filepath.Join(bin, "mm"), "."); err != nil {
		t.Fatal(err)
	}
	if err := mmbuild.Build(filepath.Join(bin, "mm-node"), "../mm-node", "-tags", tag); err != nil {
		t.Fatal(err)
	}
	certs := clusterCerts(t)
	work := filepath.Join(dir, "work")
	return func(i int, env ...string) *node {
		cluster := fmt.Sprintf("cluster:\n  name: test\n  advertise: 127.0.0.1:0\n  placement: spread\n%s  failureTimeout: %s\n%s",
			lines, testFailureTimeout, tlsLines(certs))
		s := startServeIn(t, nil, filepath.Join(bin, "mm"), work, fmt.Sprintf("node%d.yaml", i), scriptedModel, serveScript, cluster,
			append([]string{"MM_SERVE_TOKEN=" + serveToken}, env...)...)
		return &node{served: s, certs: certs}
	}
}

// clusterBinEnv names a folder with the servers of the cluster's
// providers (etcd, kube-apiserver, …): scripts/cluster-bin.sh builds
// them.
const clusterBinEnv = "MM_CLUSTER_BIN"

// clusterProgram is the path of name, in MM_CLUSTER_BIN or on PATH; the
// test skips without it, or fails when require names a variable set to 1.
func clusterProgram(t *testing.T, name, require, where string) string {
	t.Helper()
	if dir := os.Getenv(clusterBinEnv); dir != "" {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	why := fmt.Sprintf("needs %s (%s) in %s or on PATH", name, where, clusterBinEnv)
	if require != "" && os.Getenv(require) == "1" {
		t.Fatalf("%s, and %s=1", why, require)
	}
	t.Skip(why)
	return ""
}

// runProgram runs a server of the test's until it ends; its output is
// logged if the test fails.
func runProgram(t *testing.T, path string, args ...string) {
	t.Helper()
	log := &syncbuf.Buffer{}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s:\n%s", filepath.Base(path), tail(log.String(), 4000))
		}
	})
}

// httpGet is the body of a GET answered 200.
func httpGet(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, res.Status)
	}
	return string(b), err
}

func httpOK(url string) bool {
	res, err := http.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
