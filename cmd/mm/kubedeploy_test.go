package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/pgtest"
	"github.com/mm-agent/mm/internal/tcptest"
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
	for _, p := range []string{"containerd", "runc", "ctr", "iptables", "conntrack"} {
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
	hostIP := tcptest.OutsideIP(t)
	scheduler := clusterProgram(t, "kube-scheduler", "", "scripts/cluster-bin.sh builds it")
	kubelet := clusterProgram(t, "kubelet", "", "scripts/cluster-bin.sh builds it")
	proxy := clusterProgram(t, "kube-proxy", "", "scripts/cluster-bin.sh builds it")

	c := startPlane(t, planeOptions{controllers: "*", hostIP: hostIP})
	runProgram(t, scheduler, "--kubeconfig", c.kubeconfig, "--leader-elect=false")
	n := startKubeNode(t, c, hostIP, cni, image, kubelet, proxy)
	work, certs := prepareDeploy(t, c, t.TempDir(), hostIP)
	c.kubectl(t, deployManifest(t, hostIP), "apply", "--namespace", "mm", "--validate=strict", "-f", "-")
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
		log := n.log(p.uid)
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
	attack := strings.Join([]string{
		"echo ID=$(id -u)",
		"cat " + saPath + "/token " + saPath + "/..data/token /run/secrets/kubernetes.io/serviceaccount/token 2>&1",
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

// prepare makes what the manifest's header and the cluster must give it:
// the namespace, the serve token's secret, the cluster's certificates
// (mm cluster-certs), a ReadWriteMany volume for its claim (a folder of
// this machine, writable by the image's user) and a Postgres the pods
// reach at the name "postgres". It returns the volume's folder and the
// certificates' folder.
func prepareDeploy(t *testing.T, c *controlPlane, dir, hostIP string) (work, certs string) {
	c.kubectl(t, "", "create", "namespace", "mm")
	c.kubectl(t, "", "--namespace", "mm", "create", "secret", "generic", "mm", "--from-literal=token="+serveToken)
	certs = filepath.Join(dir, "cluster-certs")
	if out, err := exec.Command(mmBin, "cluster-certs", certs).CombinedOutput(); err != nil {
		t.Fatalf("mm cluster-certs: %v\n%s", err, out)
	}
	c.kubectl(t, "", "--namespace", "mm", "create", "secret", "generic", "mm-cluster", "--from-file="+certs)
	work = filepath.Join(dir, "work")
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
	pg, err := pgtest.StartWith(pgtest.Options{Listen: hostIP, Port: 5432, Trust: []string{podSubnet}})
	if err != nil {
		t.Skipf("needs PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	if err := pg.Database(testwait.Context(t), "mm"); err != nil {
		t.Fatal(err)
	}
	return work, certs
}

// manifest is deploy/kubernetes.yaml with two replicas, the pods'
// hostAliases for "postgres" (this machine: the test's node has no DNS
// of the cluster) and, in the config, the scripted model with its script.
func deployManifest(t *testing.T, hostIP string) string {
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
