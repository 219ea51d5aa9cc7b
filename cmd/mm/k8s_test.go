package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/coder/acp-go-sdk"
	"gopkg.in/yaml.v3"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve/servetest"
)

// TestClusterOnKubernetes runs two mm serve nodes with the k8s provider
// (protoactor's, in an mm-node built with -tags k8s), each as a pod would
// run: its own hostname and /etc/hosts (the kubelet's: the hostname is
// the pod's IP, 127.0.0.2 and 127.0.0.3 here), the service account's
// files at /var/run/secrets/kubernetes.io/serviceaccount, no tun device
// (a container runtime gives a pod none; with it the manifest's sandbox:
// section, without which mm does not start there), advertise
// ":PORT" as deploy/kubernetes.yaml has it (the node is known by the
// IP its remote listens on, the one its hostname resolves to). The API server is the test's: it serves the three calls the
// provider makes (get its pod, patch its labels, watch the pods), with
// pods that run and are ready. Nothing of Kubernetes runs here; the
// provider, its client and mm are the real ones.
// TestClusterOnKubernetesControlPlane runs the same against a real control
// plane (kube_test.go).
//
// The nodes are members at their pods' IPs; a session through node 0
// whose grain lives on node 1 answers its prompts; node 1, with placement
// local, keeps the sessions its clients open (it finds itself among the
// members by its member id); and a connection's requests that reach the
// other node are passed on (serve.Peers: the node that holds it, found
// among the members by the member id its id ends with, and where it
// serves by its gossip). The last two failed while protoactor's provider labelled each
// pod with a member id of its own making (provider_k8s.go).
func TestClusterOnKubernetes(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	needPods(t)
	kube := newFakeKube()
	api := httptest.NewTLSServer(kube)
	defer api.Close()
	defer kube.close()
	kube.url, kube.ca = api.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	clusterOnKubernetes(t, kube)
}

// needPods skips a test that runs nodes as pods where it cannot.
func needPods(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: each node runs in a mount and UTS namespace of its own, as in a pod")
	}
	for _, p := range []string{"unshare", "hostname", "mount"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s", p)
		}
	}
}

// kubeAPI is the Kubernetes API server the nodes' provider calls, and
// what the test does as the kubelet would.
type kubeAPI interface {
	// server is the API server's address and its CA (PEM).
	server() (url string, ca []byte)
	// token is the service account's token the pods are given.
	token(t *testing.T) string
	// pods is the names of n pods that run and are ready, pod i at
	// 127.0.0.(2+i).
	pods(t *testing.T, n int) []string
	// memberID is the member id pod name is labelled with ("" for none).
	memberID(t *testing.T, name string) string
	// labels are each pod's labels, for the log.
	labels(t *testing.T) map[string]map[string]string
}

// clusterOnKubernetes is TestClusterOnKubernetes on kube.
func clusterOnKubernetes(t *testing.T, kube kubeAPI) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	// mm serve runs the mm-node beside it: one with the k8s provider.
	if err := mmbuild.Build(filepath.Join(bin, "mm"), "."); err != nil {
		t.Fatal(err)
	}
	if err := mmbuild.Build(filepath.Join(bin, "mm-node"), "../mm-node", "-tags", "k8s"); err != nil {
		t.Fatal(err)
	}
	url, ca := kube.server()
	sa := filepath.Join(dir, "serviceaccount")
	hosts := filepath.Join(dir, "hosts")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"token": kube.token(t), "namespace": "mm", "ca.crt": string(ca)} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pods := kube.pods(t, 2)
	etcHosts := "127.0.0.1 localhost\n"
	for i, pod := range pods {
		etcHosts += fmt.Sprintf("127.0.0.%d %s\n", 2+i, pod)
	}
	if err := os.WriteFile(hosts, []byte(etcHosts), 0o644); err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort, _ := strings.Cut(strings.TrimPrefix(url, "https://"), ":")

	certs := clusterCerts(t)
	ports := freePorts(t, 2)
	work := filepath.Join(dir, "work")
	sandbox := manifestSandbox(t)
	nodes := make([]*node, 2)
	start := func(i int) *node {
		pod := pods[i]
		// As a pod: its hostname, the kubelet's /etc/hosts, the service
		// account's files.
		// And mm serve listens on all the pod's addresses, as the
		// manifest's serve.listen (0.0.0.0:8765): the other node passes
		// requests on to it at its pod's IP.
		// And no tun device: a container runtime gives a pod none
		// (containerd's default devices leave it out).
		setup := fmt.Sprintf(`hostname %s && mount --bind %s /etc/hosts && mkdir -p /var/run/secrets/kubernetes.io/serviceaccount && mount --bind %s /var/run/secrets/kubernetes.io/serviceaccount && mount -t tmpfs -o size=64k none /dev/net || exit 1
n=$#; for a in "$@"; do [ "$a" = 127.0.0.1:0 ] && a=0.0.0.0:0; set -- "$@" "$a"; done; shift $n; exec "$@"`, pod, hosts, sa)
		prefix := []string{"unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", setup, "sh"}
		placement := "spread"
		if i == 1 {
			placement = "local" // found by its member id among the members
		}
		cluster := fmt.Sprintf("cluster:\n  name: test\n  provider: k8s\n  advertise: \":%d\"\n  placement: %s\n  failureTimeout: %s\n%s", ports[i], placement, testFailureTimeout, tlsLines(certs))
		// The manifest's sandbox, which must let mm start in such a pod.
		cluster += sandbox
		s := startServeIn(t, prefix, filepath.Join(bin, "mm"), work, fmt.Sprintf("node%d.yaml", i), scriptedModel, serveScript, cluster,
			"MM_SERVE_TOKEN="+serveToken, "KUBERNETES_SERVICE_HOST="+apiHost, "KUBERNETES_SERVICE_PORT="+apiPort)
		return &node{served: s, certs: certs}
	}
	for i := range nodes {
		nodes[i] = start(i)
	}
	for i, nd := range nodes {
		waitUntil(t, fmt.Sprintf("node %d ready with 2 members", i), func() bool {
			return nd.readyz(t) == http.StatusOK && nd.members(t) == 2
		})
		if want := fmt.Sprintf("member at 127.0.0.%d:%d (k8s)", 2+i, ports[i]); !strings.Contains(nd.stderr.String(), want) {
			t.Errorf("node %d does not say %q:\n%s", i, want, nd.stderr.String())
		}
	}
	c := &testCluster{nodes: nodes}
	ctx := testwait.Context(t)
	w := nodes[0].wire(t)
	project := nodes[0].project(t)
	far := c.sessionOn(t, ctx, w, project, "node 1", func(n int) bool { return n == 1 })
	for range 3 {
		if res, err := w.ask(ctx, far, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("a prompt through node 0 to a session on node 1: %v %v\nnode 0:\n%s\nnode 1:\n%s", res, err, nodes[0].stderr.String(), nodes[1].stderr.String())
		}
	}
	// The session's output came by the nodes' stream: each names it at
	// its pod's IP, where the provider lists it, not at its hostname.
	if n := metricValue(nodes[0].metricsOf(t), "mm_cluster_stream_outs_total"); n < 3 {
		t.Errorf("node 0 took %d Outs from its stream for 3 turns on node 1; node 1's stream is at %s", n, streamAt(t, nodes[1]))
	}
	// Node 1 places what its clients open on itself: it finds itself
	// among the members by its member id, which the provider labels its
	// pod with (the actor system's id, as the gossip knows it).
	w1 := nodes[1].wire(t)
	for range 6 {
		if _, at := c.open(t, ctx, w1, project); at != 1 {
			t.Errorf("a session node 1 opened with placement local lives on node %d", at)
		}
	}
	// Each node finds the other among the members by its member id, and
	// where it serves ACP by its gossip: behind a balancer without affinity, a streamable HTTP
	// connection opened on node 0 whose requests all reach node 1 is
	// passed on to node 0 (serve.Peers, by the member id in the
	// connection's id).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	st := servetest.DialHTTP(nodes[0].url, serveToken, &http.Client{Transport: toNode{rt: tr, host: hostOf(t, nodes[1].url)}})
	defer st.Close()
	hc := acptest.Dial(acptest.NewClient(), st, st)
	if _, err := hc.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	res, err := hc.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new through node 1 to node 0's connection: %v\nnode 1:\n%s", err, nodes[1].stderr.String())
	}
	if r, err := hc.Ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt through node 1 to node 0's connection: %v %v", r, err)
	}

	// Node 1's container is killed and starts again in its pod: the pod
	// keeps its labels (the killed node's member id), its IP and its
	// port. The new node comes back under a new id, which it labels the
	// pod with: the cluster blocks the old one for good. Node 0 places
	// sessions on it and reaches them; node 1 finds itself again.
	killed := kube.memberID(t, pods[1])
	if err := nodes[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = nodes[1].waitExit(t, "node 1 killed")
	nodes[1] = start(1)
	c.nodes[1] = nodes[1]
	for i, nd := range nodes {
		waitUntil(t, fmt.Sprintf("node %d ready with 2 members after node 1 started again", i), func() bool {
			return nd.readyz(t) == http.StatusOK && nd.members(t) == 2
		})
	}
	if now := kube.memberID(t, pods[1]); now == "" || now == killed {
		t.Errorf("the pod of the node that started again is labelled %q, the killed node's was %q", now, killed)
	}
	again := c.sessionOn(t, ctx, w, project, "node 1 started again", func(n int) bool { return n == 1 })
	if res, err := w.ask(ctx, again, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt through node 0 to a session on node 1 started again: %v %v\nnode 0:\n%s\nnode 1:\n%s", res, err, nodes[0].stderr.String(), nodes[1].stderr.String())
	}
	w1 = nodes[1].wire(t)
	for range 3 {
		if _, at := c.open(t, ctx, w1, project); at != 1 {
			t.Errorf("a session node 1, started again, opened with placement local lives on node %d", at)
		}
	}
	for name, labels := range kube.labels(t) {
		t.Logf("pod %s: labels %v", name, labels)
	}
}

// manifestSandbox is the sandbox: section of the config
// deploy/kubernetes.yaml's ConfigMap gives mm, as a top-level key ("" for
// none).
func manifestSandbox(t *testing.T) string {
	t.Helper()
	f, err := os.Open("../../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for dec := yaml.NewDecoder(f); ; {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("deploy/kubernetes.yaml has no ConfigMap with a config.yaml: %v", err)
		}
		config, ok := doc.Data["config.yaml"]
		if doc.Kind != "ConfigMap" || !ok {
			continue
		}
		var keys map[string]any
		if err := yaml.Unmarshal([]byte(config), &keys); err != nil {
			t.Fatalf("deploy/kubernetes.yaml's config.yaml: %v", err)
		}
		if keys["sandbox"] == nil {
			return ""
		}
		out, err := yaml.Marshal(map[string]any{"sandbox": keys["sandbox"]})
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
}

func (k *fakeKube) server() (string, []byte) { return k.url, k.ca }

func (k *fakeKube) token(*testing.T) string { return "t0ken" }

func (k *fakeKube) pods(_ *testing.T, n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("mm-%d", i))
		k.add(names[i], fmt.Sprintf("127.0.0.%d", 2+i))
	}
	return names
}

func (k *fakeKube) memberID(_ *testing.T, name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	labels, _ := k.byName[name]["metadata"].(map[string]any)["labels"].(map[string]any)
	id, _ := labels["cluster.proto.actor/member-id"].(string)
	return id
}

func (k *fakeKube) labels(*testing.T) map[string]map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]map[string]string{}
	for name, pod := range k.byName {
		out[name] = map[string]string{}
		for l, v := range pod["metadata"].(map[string]any)["labels"].(map[string]any) {
			out[name][l] = fmt.Sprint(v)
		}
	}
	return out
}

// fakeKube is the part of a Kubernetes API server that protoactor's k8s
// provider calls: GET and PATCH (a JSON patch of its labels) of its own
// pod, and a watch of the namespace's pods, each change to a pod sent to
// every watcher.
type fakeKube struct {
	mu       sync.Mutex
	byName   map[string]map[string]any // by name
	url      string
	ca       []byte
	version  int
	watchers map[chan []byte]bool
	done     chan struct{}
}

func newFakeKube() *fakeKube {
	return &fakeKube{byName: map[string]map[string]any{}, watchers: map[chan []byte]bool{}, done: make(chan struct{})}
}

func (k *fakeKube) close() { close(k.done) }

// add makes a pod that runs, whose one container is ready, at ip.
func (k *fakeKube) add(name, ip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version++
	k.byName[name] = map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "mm", "uid": "uid-" + name, "resourceVersion": fmt.Sprint(k.version), "labels": map[string]any{"app": "mm"}},
		"status": map[string]any{"phase": "Running", "podIP": ip, "podIPs": []any{map[string]any{"ip": ip}},
			"containerStatuses": []any{map[string]any{"name": "mm", "ready": true}}},
	}
}

func (k *fakeKube) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/api/v1/namespaces/mm/pods"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, prefix), "/")
	w.Header().Set("Content-Type", "application/json")
	switch {
	case name == "" && r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		k.watch(w, r)
	case name != "" && (r.Method == http.MethodGet || r.Method == http.MethodPatch):
		k.mu.Lock()
		pod := k.byName[name]
		if pod == nil {
			k.mu.Unlock()
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
			return
		}
		if r.Method == http.MethodPatch {
			meta := pod["metadata"].(map[string]any)
			labels, err := patchLabels(r, meta["labels"].(map[string]any))
			if err != nil {
				k.mu.Unlock()
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			k.version++
			meta["labels"], meta["resourceVersion"] = labels, fmt.Sprint(k.version)
			k.send("MODIFIED", pod)
		}
		b, _ := json.Marshal(pod)
		k.mu.Unlock()
		w.Write(b)
	default:
		http.Error(w, "not here", http.StatusNotFound)
	}
}

// patchLabels is labels after r's patch: a JSON patch that replaces them
// all (protoactor's provider), or a merge patch of some (mm's).
func patchLabels(r *http.Request, labels map[string]any) (map[string]any, error) {
	switch r.Header.Get("Content-Type") {
	case "application/json-patch+json":
		var patch []struct {
			Op, Path string
			Value    map[string]any
		}
		if err := json.NewDecoder(r.Body).Decode(&patch); err != nil || len(patch) != 1 || patch[0].Op != "replace" || patch[0].Path != "/metadata/labels" {
			return nil, fmt.Errorf("a JSON patch this server does not take: %v %v", patch, err)
		}
		return patch[0].Value, nil
	case "application/merge-patch+json":
		var patch struct {
			Metadata struct {
				Labels map[string]any `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
			return nil, err
		}
		out := maps.Clone(labels)
		for k, v := range patch.Metadata.Labels {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("a patch of type %q", r.Header.Get("Content-Type"))
}

// send tells every watcher of a change to pod (k.mu held).
func (k *fakeKube) send(kind string, pod map[string]any) {
	b, _ := json.Marshal(map[string]any{"type": kind, "object": pod})
	for ch := range k.watchers {
		select {
		case ch <- b:
		default: // a watcher that reads nothing misses it
		}
	}
}

func (k *fakeKube) watch(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 64)
	k.mu.Lock()
	k.watchers[ch] = true
	for _, pod := range k.byName {
		b, _ := json.Marshal(map[string]any{"type": "ADDED", "object": pod})
		ch <- b
	}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.watchers, ch)
		k.mu.Unlock()
	}()
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	for {
		select {
		case b := <-ch:
			w.Write(append(b, '\n'))
			flusher.Flush()
		case <-r.Context().Done():
			return
		case <-k.done:
			return
		}
	}
}
