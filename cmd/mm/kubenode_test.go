package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/pgtest"
	"github.com/mm-agent/mm/internal/testwait"
)

// kubeImageEnv names the image TestDeployOnKubernetesNode runs: a
// docker archive of the Dockerfile's image (podman save -o mm.tar mm).
const kubeImageEnv = "MM_KUBE_IMAGE"

// TestDeployOnKubernetesNode deploys deploy/kubernetes.yaml on a
// Kubernetes of one real node, as an operator would: the control plane of
// TestClusterOnKubernetesControlPlane with all of kube-controller-manager's
// controllers and kube-scheduler, and a node (containerd and runc, the CNI
// bridge, the kubelet and kube-proxy) that runs the image built from the
// Dockerfile. The test makes what the manifest's header says to make (the
// namespace, the two secrets) and what the manifest leaves to the
// cluster (a ReadWriteMany volume for its claim, a Postgres at the name
// "postgres"), and changes in the manifest only the replicas (2) and,
// in the config, the scripted model. Then, from outside the node:
//
//   - both pods start and pass their probes, over the pod network;
//   - they are one cluster of two members, each pod labelled with its
//     member id;
//   - a session through the Service (kube-proxy) answers, and its
//     command, attacked from inside, runs as the image's user under
//     Landlock, reads none of mm's secrets (the serve token, the cluster's
//     key, the service account's token), reaches neither the API server
//     nor the store, and writes the shared volume;
//   - after kubectl rollout restart (SIGTERM, the drain, new pods that
//     join), the session loads from the store through the Service and
//     answers.
//
// It needs root, containerd, runc, ctr, iptables, conntrack and the CNI
// plugins on this machine, the programs scripts/cluster-bin.sh builds
// (with the kubelet, kube-scheduler and kube-proxy), and the image in
// MM_KUBE_IMAGE. docs/cluster.md says how to run it; it is not run in CI
// (building the image and Kubernetes takes about 20 minutes).
func TestDeployOnKubernetesNode(t *testing.T) {
	testwait.Short(t, "a Kubernetes node")
	image := os.Getenv(kubeImageEnv)
	if image == "" {
		t.Skipf("needs %s: the image as a docker archive (podman save -o mm.tar mm)", kubeImageEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a Kubernetes node")
	}
	for _, p := range []string{"containerd", "runc", "ctr", "iptables", "conntrack", "runuser"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s", p)
		}
	}
	cni := ""
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if fileExists(filepath.Join(d, "bridge")) && fileExists(filepath.Join(d, "host-local")) {
			cni = d
		}
	}
	if cni == "" {
		t.Skip("needs the CNI plugins (bridge, host-local, portmap, loopback)")
	}
	hostIP := machineIP(t)
	scheduler := clusterProgram(t, "kube-scheduler", "", "scripts/cluster-bin.sh builds it")
	kubelet := clusterProgram(t, "kubelet", "", "scripts/cluster-bin.sh builds it")
	proxy := clusterProgram(t, "kube-proxy", "", "scripts/cluster-bin.sh builds it")

	c := startPlane(t, planeOptions{controllers: "*", hostIP: hostIP})
	runProgram(t, scheduler, "--kubeconfig", c.kubeconfig, "--leader-elect=false")
	n := startKubeNode(t, c, hostIP, cni, image, kubelet, proxy)
	work, certs := n.prepare(t, c, hostIP)
	c.kubectl(t, n.manifest(t, hostIP), "apply", "--namespace", "mm", "--validate=strict", "-f", "-")
	t.Cleanup(func() {
		// The pods go before the node does: the kubelet leaves its
		// containers running when it stops.
		cmd := exec.Command(c.kubectlBin, "--kubeconfig", c.kubeconfig, "delete", "namespace", "mm", "--wait", "--timeout", "90s")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("deleting the namespace: %v %s", err, out)
		}
	})

	pods := n.ready(t, c, 2)
	ctx := testwait.Context(t)
	for _, p := range pods {
		s := &served{url: "http://" + net.JoinHostPort(p.ip, "8765") + "/acp"}
		waitUntil(t, fmt.Sprintf("pod %s a member of a cluster of 2", p.name), func() bool { return s.members(t) == 2 })
		if c.memberID(t, p.name) == "" {
			t.Errorf("pod %s carries no member id", p.name)
		}
		log := n.log(t, p.uid)
		if !strings.Contains(strings.ToLower(log), "landlock") {
			t.Errorf("pod %s's node does not say it confines with Landlock:\n%s", p.name, log)
		}
		t.Logf("pod %s at %s:\n%s", p.name, p.ip, tail(log, 2000))
	}

	// Through the Service, as a client in the cluster would.
	svc := c.serviceIP(t, "mm")
	s := &served{url: "http://" + net.JoinHostPort(svc, "8765") + "/acp", ws: "ws://" + net.JoinHostPort(svc, "8765") + "/acp"}
	w := s.wire(t)
	project := filepath.Join(work, "demo")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(project, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: "/work/demo", McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new through the Service: %v", err)
	}
	if r, err := w.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping through the Service: %v %v", r, err)
	}
	before := len(w.rec.Updates(res.SessionId))
	if r, err := w.ask(ctx, res.SessionId, "attack"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the attack: %v %v", r, err)
	}
	text := acptest.Text(w.rec.Updates(res.SessionId)[before:])
	t.Logf("the tenant's command in a pod:\n%s", text)
	if !strings.Contains(text, "ATTACK-DONE") {
		t.Fatalf("the attack did not run to its end: %q", text)
	}
	if !strings.Contains(text, "ID=10001\n") {
		t.Errorf("the command did not run as the image's user, 10001")
	}
	key, err := os.ReadFile(filepath.Join(certs, "node-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	keyLines := strings.Split(strings.TrimSpace(string(key)), "\n")
	for what, secret := range map[string]string{
		"the serve token":              serveToken,
		"the cluster's key":            keyLines[1],
		"the service account's token":  "eyJ", // a JWT's header
		"the API server, from the pod": "API-REACHED",
		"the store, from the pod":      "STORE-REACHED",
	} {
		if strings.Contains(text, secret) {
			t.Errorf("the tenant's command in a pod reached %s", what)
		}
	}
	if fi, err := os.Stat(filepath.Join(project, "made-in-the-pod")); err != nil {
		t.Errorf("the command did not write the shared volume: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != 10001 {
		t.Errorf("the command's file on the volume belongs to %d, not 10001", st.Uid)
	}

	// A rolling restart: each old pod drains on SIGTERM, the new ones
	// join, and the session, kept in the store, loads through the Service.
	c.kubectl(t, "", "--namespace", "mm", "rollout", "restart", "deployment/mm")
	c.kubectl(t, "", "--namespace", "mm", "rollout", "status", "deployment/mm", "--timeout", testwait.Hang.String())
	fresh := n.ready(t, c, 2)
	for _, p := range fresh {
		if slices.ContainsFunc(pods, func(o kubePod) bool { return o.name == p.name }) {
			t.Fatalf("pod %s outlived the rolling restart", p.name)
		}
		s := &served{url: "http://" + net.JoinHostPort(p.ip, "8765") + "/acp"}
		waitUntil(t, fmt.Sprintf("new pod %s a member of a cluster of 2", p.name), func() bool { return s.members(t) == 2 })
	}
	w2 := s.wire(t)
	if _, err := w2.LoadSession(ctx, acp.LoadSessionRequest{SessionId: res.SessionId, Cwd: "/work/demo", McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load after the rolling restart: %v", err)
	}
	if r, err := w2.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping after the rolling restart: %v %v", r, err)
	}
}

// kubeNodeScript is the scripted model of TestDeployOnKubernetesNode's
// pods: "attack" runs the tenant's command (hostIP is the store's).
func kubeNodeScript(hostIP string) string {
	sa := "/var/run/secrets/kubernetes.io/serviceaccount"
	attack := strings.Join([]string{
		"echo ID=$(id -u)",
		"cat " + sa + "/token " + sa + "/..data/token /run/secrets/kubernetes.io/serviceaccount/token 2>&1",
		"cat /etc/mm/cluster/node-key.pem /etc/mm/cluster/..data/node-key.pem 2>&1",
		"env | grep -a -E 'MM_|KUBERNETES'",
		"for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $e 2>/dev/null; done | grep -a MM_SERVE",
		"(exec 3<>/dev/tcp/10.96.0.1/443 && echo API-REACHED) 2>&1",
		"(exec 3<>/dev/tcp/" + hostIP + "/5432 && echo STORE-REACHED) 2>&1",
		"echo from-a-pod > made-in-the-pod && echo WROTE-WORK",
		"echo ATTACK-DONE",
	}, "\n")
	return serveScript + fmt.Sprintf("  - match: \"^attack$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", attack)
}

// machineIP is this machine's IPv4 address that is not loopback: where
// the pods reach the API server and the store.
func machineIP(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && ip.IP.IsGlobalUnicast() && !strings.HasPrefix(ip.IP.String(), "10.") {
			return ip.IP.String()
		}
	}
	t.Skip("needs an address that is not loopback")
	return ""
}

// kubeNode is a Kubernetes node of the test's.
type kubeNode struct {
	dir  string
	sock string // containerd's
}

// podSubnet is the pods' addresses on the test's node.
const podSubnet = "10.244.0.0/24"

// startKubeNode starts containerd (with the image and a pause image of
// the test's, since no registry is reached), the CNI bridge, the kubelet
// and kube-proxy, and waits for the node to be ready.
func startKubeNode(t *testing.T, c *controlPlane, hostIP, cni, image, kubelet, proxy string) *kubeNode {
	n := &kubeNode{dir: t.TempDir()}
	// Once the kubelet and containerd are gone (the cleanups run last
	// first): their volumes and containers' file systems.
	t.Cleanup(func() { unmountUnder(n.dir) })
	n.sock = filepath.Join(n.dir, "containerd.sock")
	for _, s := range []struct{ path, value string }{
		{"/proc/sys/net/ipv4/ip_forward", "1"},
		{"/proc/sys/net/bridge/bridge-nf-call-iptables", "1"},
	} {
		old, err := os.ReadFile(s.path)
		if err != nil {
			t.Skipf("needs %s: %v", s.path, err)
		}
		if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(s.path, old, 0o644) })
	}
	const pause = "localhost/mm-test-pause:1"
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Where root has no CAP_SYS_RESOURCE (this machine), the kubelet's -998
  # for a pod's sandbox fails runc: keep what containerd has.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false
`, n.path("root"), n.path("state"), n.sock, pause, cni, n.path("net.d"))
	bridge := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "mm-test", "plugins": [
  {"type": "bridge", "bridge": "mmcni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}`, podSubnet, n.path("ipam"))
	kubeletConf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: ["none"]
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
`, n.sock, n.path("pod-logs"))
	for name, data := range map[string]string{"containerd.toml": conf, "net.d/10-mm.conflist": bridge, "kubelet.yaml": kubeletConf} {
		if err := os.MkdirAll(filepath.Dir(n.path(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.path(name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	containerd, _ := exec.LookPath("containerd")
	runProgram(t, containerd, "--config", n.path("containerd.toml"))
	t.Cleanup(func() {
		// What the kubelet left running, and the bridge.
		out, _ := exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command("ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run()
		}
		_ = exec.Command("ip", "link", "del", "mmcni0").Run()
	})
	waitUntil(t, "containerd", func() bool { return fileExists(n.sock) })
	n.ctr(t, "images", "import", pauseImage(t, pause))
	// The manifest's image, mm:latest, is docker.io/library/mm:latest to
	// the kubelet: the archive's image (unpacking NAME (sha256:…)) is
	// given that name too.
	imported := n.ctr(t, "images", "import", image)
	m := regexp.MustCompile(`unpacking (\S+) \(`).FindStringSubmatch(imported)
	if m == nil {
		t.Fatalf("%s holds no image: %s", image, imported)
	}
	if m[1] != "docker.io/library/mm:latest" {
		n.ctr(t, "images", "tag", m[1], "docker.io/library/mm:latest")
	}
	runProgram(t, kubelet, "--config", n.path("kubelet.yaml"), "--kubeconfig", c.kubeconfig, "--root-dir", n.path("kubelet"),
		"--cert-dir", n.path("kubelet-pki"), "--hostname-override", "mm-node", "--node-ip", hostIP)
	ports := freePorts(t, 2)
	runProgram(t, proxy, "--kubeconfig", c.kubeconfig, "--hostname-override", "mm-node", "--cluster-cidr", podSubnet,
		"--proxy-mode", "iptables", "--conntrack-max-per-core", "0", "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--healthz-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	t.Cleanup(func() {
		_ = exec.Command(proxy, "--cleanup").Run()
		// What the kubelet and the CNI bridge added to the firewall.
		for _, ipt := range []string{"iptables", "ip6tables"} {
			_ = exec.Command("sh", "-c", ipt+"-save | grep -v -e KUBE- -e CNI- | "+ipt+"-restore").Run()
		}
	})
	waitUntil(t, "the node ready", func() bool {
		b, code := c.call(t, http.MethodGet, "/api/v1/nodes/mm-node", "", nil)
		return code == http.StatusOK && bytes.Contains(b, []byte(`"type":"Ready","status":"True"`))
	})
	return n
}

func (n *kubeNode) path(name string) string { return filepath.Join(n.dir, name) }

func (n *kubeNode) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ctr", append([]string{"--address", n.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// prepare makes what the manifest's header and the cluster must give it:
// the namespace, the serve token's secret, the cluster's certificates
// (mm cluster-certs), a ReadWriteMany volume for its claim (a folder of
// this machine, writable by the image's user) and a Postgres the pods
// reach at the name "postgres". It returns the volume's folder and the
// certificates' folder.
func (n *kubeNode) prepare(t *testing.T, c *controlPlane, hostIP string) (work, certs string) {
	c.kubectl(t, "", "create", "namespace", "mm")
	c.kubectl(t, "", "--namespace", "mm", "create", "secret", "generic", "mm", "--from-literal=token="+serveToken)
	certs = filepath.Join(n.dir, "cluster-certs")
	if out, err := exec.Command(mmBin, "cluster-certs", certs).CombinedOutput(); err != nil {
		t.Fatalf("mm cluster-certs: %v\n%s", err, out)
	}
	c.kubectl(t, "", "--namespace", "mm", "create", "secret", "generic", "mm-cluster", "--from-file="+certs)
	work = filepath.Join(n.dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: mm-work}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  storageClassName: ""
  hostPath: {path: %q, type: Directory}
`, work), "apply", "-f", "-")
	// Where the user postgres reaches it (a test's temporary folders are
	// root's alone).
	pg, err := os.MkdirTemp("/var/tmp", "mm-kube-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pg) })
	startPodsPostgres(t, pg, hostIP)
	return work, certs
}

// startPodsPostgres runs a Postgres that listens on hostIP:5432 and lets
// the pods in as mm, with the database mm (the manifest's store.url).
func startPodsPostgres(t *testing.T, dir, hostIP string) {
	bin, err := pgtest.Bin()
	if err != nil {
		t.Skipf("needs PostgreSQL: %v", err)
	}
	if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
		t.Skipf("needs the user postgres: %v %s", err, out)
	}
	as := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	data := filepath.Join(dir, "data")
	as("initdb", "-D", data, "-A", "trust", "-U", "mm")
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(hba, "host all mm %s trust\n", podSubnet)
	hba.Close()
	as("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", "-p 5432 -k "+dir+" -c listen_addresses="+hostIP, "start")
	t.Cleanup(func() {
		_ = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop").Run()
	})
	as("createdb", "-h", dir, "-p", "5432", "-U", "mm", "mm")
}

// manifest is deploy/kubernetes.yaml with two replicas, the pods'
// hostAliases for "postgres" (this machine: the test's node has no DNS
// of the cluster) and, in the config, the scripted model with its script.
func (n *kubeNode) manifest(t *testing.T, hostIP string) string {
	b, err := os.ReadFile("../../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := string(b)
	script := kubeNodeScript(hostIP)
	for _, r := range []struct{ old, new string }{
		{"replicas: 3", "replicas: 2"},
		{"      serviceAccountName: mm\n", fmt.Sprintf("      serviceAccountName: mm\n      hostAliases: [{ip: %q, hostnames: [postgres]}]\n", hostIP)},
		{"    sandbox: {network: false}\n", "    sandbox: {network: false}\n    model: {provider: scripted, script: /etc/mm/script.yaml}\n  script.yaml: |\n" +
			"    " + strings.ReplaceAll(strings.TrimSpace(script), "\n", "\n    ") + "\n"},
	} {
		if !strings.Contains(m, r.old) {
			t.Fatalf("deploy/kubernetes.yaml has no %q", r.old)
		}
		m = strings.Replace(m, r.old, r.new, 1)
	}
	return m
}

// kubePod is a pod of the Deployment.
type kubePod struct{ name, uid, ip string }

// ready waits for the Deployment's n pods to run and be ready (their
// probes passed), and no other of its pods to be left.
func (n *kubeNode) ready(t *testing.T, c *controlPlane, want int) []kubePod {
	t.Helper()
	var pods []kubePod
	deadline := time.Now().Add(2 * testwait.Hang)
	for {
		pods = pods[:0]
		b, _ := c.call(t, http.MethodGet, "/api/v1/namespaces/mm/pods?labelSelector=app%3Dmm", "", nil)
		var l struct {
			Items []struct {
				Metadata struct {
					Name              string  `json:"name"`
					UID               string  `json:"uid"`
					DeletionTimestamp *string `json:"deletionTimestamp"`
				} `json:"metadata"`
				Status struct {
					PodIP      string `json:"podIP"`
					Conditions []struct {
						Type   string `json:"type"`
						Status string `json:"status"`
					} `json:"conditions"`
				} `json:"status"`
			} `json:"items"`
		}
		_ = json.Unmarshal(b, &l)
		all := len(l.Items)
		for _, p := range l.Items {
			if p.Metadata.DeletionTimestamp != nil {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					pods = append(pods, kubePod{p.Metadata.Name, p.Metadata.UID, p.Status.PodIP})
				}
			}
		}
		if len(pods) == want && all == want {
			return pods
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Deployment's %d pods are not ready:\n%s\n%s", want,
				c.kubectl(t, "", "--namespace", "mm", "get", "pods,pvc,events", "-o", "wide"), n.logs(t))
		}
		time.Sleep(time.Second)
	}
}

// log is what the containers of the pod uid wrote (the kubelet's files).
func (n *kubeNode) log(t *testing.T, uid string) string {
	var out strings.Builder
	files, _ := filepath.Glob(n.path("pod-logs/*_" + uid + "/*/*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out.Write(b)
	}
	return out.String()
}

// logs is what every container of the node wrote, for a failure.
func (n *kubeNode) logs(t *testing.T) string {
	var out strings.Builder
	files, _ := filepath.Glob(n.path("pod-logs/*/*/*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(&out, "== %s\n%s\n", f, tail(string(b), 3000))
	}
	return out.String()
}

// serviceIP is the cluster IP of the Service name in the namespace mm.
func (c *controlPlane) serviceIP(t *testing.T, name string) string {
	b, code := c.call(t, http.MethodGet, "/api/v1/namespaces/mm/services/"+name, "", nil)
	var s struct {
		Spec struct {
			ClusterIP string `json:"clusterIP"`
		} `json:"spec"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &s) != nil || s.Spec.ClusterIP == "" {
		t.Fatalf("the Service %s: %d %s", name, code, b)
	}
	return s.Spec.ClusterIP
}

// pauseImage writes a docker archive of a pause image named name, a
// static program that waits for a signal, and returns its path: what
// containerd runs as each pod's sandbox.
func pauseImage(t *testing.T, name string) string {
	dir := t.TempDir()
	src := filepath.Join(dir, "pause.go")
	if err := os.WriteFile(src, []byte(`package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "pause"), src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the pause program: %v\n%s", err, out)
	}
	prog, err := os.ReadFile(filepath.Join(dir, "pause"))
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	_ = tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(prog)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(prog)
	_ = tw.Close()
	sum := sha256.Sum256(layer.Bytes())
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}}})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{name}, "Layers": []string{"layer.tar"}}})
	archive := filepath.Join(dir, "pause.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		_ = aw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg})
		_, _ = aw.Write(e.data)
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return archive
}

// unmountUnder unmounts what is mounted beneath dir (the kubelet's
// volumes, and its own folder, which it mounts on itself), deepest first,
// until nothing is (a folder may be mounted more than once).
func unmountUnder(dir string) {
	for range 5 {
		if unmountOnce(dir) == 0 {
			return
		}
	}
}

func unmountOnce(dir string) int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			p, err := strconv.Unquote(`"` + strings.ReplaceAll(f[4], `\040`, " ") + `"`)
			if err != nil {
				p = f[4]
			}
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
	return len(points)
}
