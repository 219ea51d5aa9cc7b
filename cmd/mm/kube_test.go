package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestClusterOnKubernetesControlPlane is TestClusterOnKubernetes against a
// real Kubernetes control plane: etcd, kube-apiserver (RBAC on, service
// account tokens signed) and kube-controller-manager, from the folder
// MM_CLUSTER_BIN names or PATH (scripts/cluster-bin.sh builds them), with
// kubectl. The test applies deploy/kubernetes.yaml as it is, with two
// replicas: the Deployment's controllers make the pods, and the test is
// their kubelet: it runs each pod's node, as TestClusterOnKubernetes does,
// with a token the API server issued to the manifest's service account,
// and reports the pod running and ready at its IP. So the provider's
// calls go through the manifest's Role, and the labels the nodes write
// are checked by the API server itself. No kubelet or container runtime
// runs here: the image, the probes and the volumes are not tried.
func TestClusterOnKubernetesControlPlane(t *testing.T) {
	testwait.Short(t, "the cluster tests")
	needPods(t)
	clusterOnKubernetes(t, startControlPlane(t))
}

// controlPlane is a Kubernetes control plane of the test's.
type controlPlane struct {
	dir        string
	url        string
	ca         []byte
	kubeconfig string
	kubectlBin string
	admin      *http.Client
}

// adminToken is the API server's static token of a member of
// system:masters, for the test's own calls.
const adminToken = "mm-test-admin-0123456789abcdef"

func startControlPlane(t *testing.T) *controlPlane {
	c := startPlane(t, planeOptions{controllers: "deployment,replicaset"})
	manifest, err := os.ReadFile("../../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	two := strings.Replace(string(manifest), "replicas: 3", "replicas: 2", 1)
	if two == string(manifest) {
		t.Fatal("deploy/kubernetes.yaml has no replicas: 3 to make 2")
	}
	c.kubectl(t, "", "create", "namespace", "mm")
	t.Log(c.kubectl(t, two, "apply", "--namespace", "mm", "--validate=strict", "-f", "-"))
	return c
}

// planeOptions say how startPlane starts a control plane.
type planeOptions struct {
	// controllers are kube-controller-manager's --controllers.
	controllers string
	// hostIP, when set, is the address of this machine that the pods of
	// a node of its own reach the API server at (through the Service
	// kubernetes, at its first IP, 10.96.0.1): the API server listens on
	// every address and its certificate names both. Otherwise it
	// listens on 127.0.0.1 alone.
	hostIP string
}

// startPlane starts etcd, kube-apiserver and kube-controller-manager.
func startPlane(t *testing.T, o planeOptions) *controlPlane {
	const built = "scripts/cluster-bin.sh builds it"
	etcdBin := clusterProgram(t, "etcd", "", built)
	apiserver := clusterProgram(t, "kube-apiserver", "", built)
	controllers := clusterProgram(t, "kube-controller-manager", "", built)
	c := &controlPlane{dir: t.TempDir(), kubectlBin: clusterProgram(t, "kubectl", "", built)}
	// The API server's certificate for 127.0.0.1, its own CA (client-go
	// and kubectl take it as their certificate-authority).
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	bind := "127.0.0.1"
	if o.hostIP != "" {
		ips = append(ips, net.ParseIP(o.hostIP), net.IPv4(10, 96, 0, 1))
		bind = "0.0.0.0"
	}
	certFile, keyFile := selfSignedFor(t, ips)
	ca, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	c.ca = ca
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"tokens.csv": []byte(adminToken + `,admin,admin,"system:masters"` + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 3)
	etcd := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	runProgram(t, etcdBin, "--data-dir", c.path("etcd"), "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer,
		"--listen-metrics-urls", "", "--log-level", "warn")
	c.url = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	advertise := "127.0.0.1"
	if o.hostIP != "" {
		advertise = o.hostIP
	}
	runProgram(t, apiserver, "--etcd-servers", etcd, "--bind-address", bind, "--advertise-address", advertise,
		"--secure-port", fmt.Sprint(ports[2]), "--tls-cert-file", certFile, "--tls-private-key-file", keyFile,
		"--token-auth-file", c.path("tokens.csv"), "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", c.path("sa.key"),
		"--service-account-signing-key-file", c.path("sa.key"), "--service-cluster-ip-range", "10.96.0.0/16",
		"--cert-dir", c.path("certs"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c.admin = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.admin.CloseIdleConnections)
	waitUntil(t, "kube-apiserver ready", func() bool {
		_, code := c.call(t, http.MethodGet, "/readyz", "", nil)
		return code == http.StatusOK
	})
	c.kubeconfig = c.path("kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, c.url, certFile, adminToken)
	if err := os.WriteFile(c.kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", c.kubeconfig, "--controllers", o.controllers, "--leader-elect=false", "--secure-port", "0"}
	if o.hostIP != "" {
		// The service accounts' tokens, and the CA a pod finds in
		// kube-root-ca.crt.
		args = append(args, "--service-account-private-key-file", c.path("sa.key"), "--root-ca-file", certFile)
	}
	runProgram(t, controllers, args...)
	return c
}

func (c *controlPlane) path(name string) string { return filepath.Join(c.dir, name) }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// call is a request of the test's to the API server, as an admin.
func (c *controlPlane) call(t *testing.T, method, path, contentType string, body []byte) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := c.admin.Do(req)
	if err != nil {
		return nil, 0
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return b.Bytes(), res.StatusCode
}

func (c *controlPlane) kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.kubectlBin, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *controlPlane) server() (string, []byte) { return c.url, c.ca }

// token is one the API server issues to the manifest's service account
// (kubectl create token: the TokenRequest API), as a projected volume
// gives a pod.
func (c *controlPlane) token(t *testing.T) string {
	return strings.TrimSpace(c.kubectl(t, "", "create", "token", "mm", "--namespace", "mm", "--duration", "2h"))
}

type podList struct {
	Items []kubeObjectPod `json:"items"`
}

// kubeObjectPod is what the tests read of a pod.
type kubeObjectPod struct {
	Metadata struct {
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		PodIP      string         `json:"podIP"`
		Conditions []podCondition `json:"conditions"`
	} `json:"status"`
}

type podCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// ready says whether the pod's condition Ready is true.
func (p kubeObjectPod) ready() bool {
	return slices.Contains(p.Status.Conditions, podCondition{"Ready", "True"})
}

func (c *controlPlane) list(t *testing.T) podList {
	t.Helper()
	b, code := c.call(t, http.MethodGet, "/api/v1/namespaces/mm/pods?labelSelector=app%3Dmm", "", nil)
	var l podList
	if code != http.StatusOK || json.Unmarshal(b, &l) != nil {
		t.Fatalf("the pods: %d %s", code, b)
	}
	return l
}

// pods waits for the Deployment's n pods, then does what their kubelet
// would once each container ran and its readiness probe passed: reports
// pod i running and ready at 127.0.0.(2+i).
func (c *controlPlane) pods(t *testing.T, n int) []string {
	var names []string
	waitUntil(t, fmt.Sprintf("the Deployment's %d pods", n), func() bool {
		names = names[:0]
		for _, p := range c.list(t).Items {
			names = append(names, p.Metadata.Name)
		}
		return len(names) == n
	})
	slices.Sort(names)
	now := time.Now().UTC().Format(time.RFC3339)
	for i, name := range names {
		ip := fmt.Sprintf("127.0.0.%d", 2+i)
		status, _ := json.Marshal(map[string]any{"status": map[string]any{
			"phase": "Running", "podIP": ip, "podIPs": []any{map[string]any{"ip": ip}}, "hostIP": "127.0.0.1", "startTime": now,
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now},
				map[string]any{"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
			},
			"containerStatuses": []any{map[string]any{"name": "mm", "ready": true, "started": true, "restartCount": 0,
				"image": "mm:latest", "imageID": "", "state": map[string]any{"running": map[string]any{"startedAt": now}}}},
		}})
		if b, code := c.call(t, http.MethodPatch, "/api/v1/namespaces/mm/pods/"+name+"/status", "application/merge-patch+json", status); code != http.StatusOK {
			t.Fatalf("pod %s's status: %d %s", name, code, b)
		}
	}
	return names
}

func (c *controlPlane) memberID(t *testing.T, name string) string {
	return c.labels(t)[name]["cluster.proto.actor/member-id"]
}

func (c *controlPlane) labels(t *testing.T) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, p := range c.list(t).Items {
		out[p.Metadata.Name] = p.Metadata.Labels
	}
	return out
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
