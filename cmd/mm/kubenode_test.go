package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
)

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

// kubePod is a pod of the Deployment.
type kubePod struct{ name, uid, ip string }

// ready waits for the Deployment's want pods to run and be ready (their
// probes passed), and no other of its pods to be left. If they are not,
// it says what the pods and their containers did.
func (n *kubeNode) ready(t *testing.T, c *controlPlane, want int) []kubePod {
	t.Helper()
	var pods []kubePod
	done := false
	defer func() {
		if !done {
			out, _ := exec.Command(c.kubectlBin, "--kubeconfig", c.kubeconfig, "--namespace", "mm", "get", "pods,pvc,events", "-o", "wide").CombinedOutput()
			t.Logf("the pods:\n%s\n%s", out, n.logs())
		}
	}()
	waitUntil(t, fmt.Sprintf("the Deployment's %d pods ready, and no other", want), func() bool {
		l := c.list(t)
		pods = pods[:0]
		for _, p := range l.Items {
			if p.Metadata.DeletionTimestamp == nil && p.ready() {
				pods = append(pods, kubePod{p.Metadata.Name, p.Metadata.UID, p.Status.PodIP})
			}
		}
		return len(pods) == want && len(l.Items) == want
	})
	done = true
	return pods
}

// log is what the containers of the pod uid wrote (the kubelet's files).
func (n *kubeNode) log(uid string) string {
	var out strings.Builder
	files, _ := filepath.Glob(n.path("pod-logs/*_" + uid + "/*/*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out.Write(b)
	}
	return out.String()
}

// logs is what every container of the node wrote, for a failure.
func (n *kubeNode) logs() string {
	var out strings.Builder
	files, _ := filepath.Glob(n.path("pod-logs/*/*/*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(&out, "== %s\n%s\n", f, tail(string(b), 3000))
	}
	return out.String()
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
