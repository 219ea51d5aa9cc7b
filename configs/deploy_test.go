package configs

import (
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDeployFiles: deploy/mm.yaml is a config mm accepts for a cluster
// whose sessions move (kept, in Postgres), and deploy/compose.yaml runs
// three nodes on it and a Postgres, each node's health taken from /readyz,
// each given what mm serve's sandbox needs of Docker.
// No container engine runs here: this is what can be checked without one.
func TestDeployFiles(t *testing.T) {
	data, err := os.ReadFile("../deploy/mm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data, "deploy/mm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Cluster.Enabled() || !cfg.Sessions.Enabled || !strings.HasPrefix(cfg.Store.URL, "postgres://") || len(cfg.Cluster.Peers) != 3 {
		t.Errorf("deploy/mm.yaml: cluster %+v, sessions.enabled %v, store.url %q", cfg.Cluster, cfg.Sessions.Enabled, cfg.Store.URL)
	}

	data, err = os.ReadFile("../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Hostname    string   `yaml:"hostname"`
			Command     []string `yaml:"command"`
			Volumes     []string `yaml:"volumes"`
			Devices     []string `yaml:"devices"`
			SecurityOpt []string `yaml:"security_opt"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatal(err)
	}
	if _, ok := compose.Services["postgres"]; !ok {
		t.Error("deploy/compose.yaml: no postgres service")
	}
	for _, peer := range cfg.Cluster.Peers {
		host, _, _ := strings.Cut(peer, ":")
		s, ok := compose.Services[host]
		switch {
		case !ok || s.Hostname != host:
			t.Errorf("deploy/compose.yaml: no service with hostname %s, a peer of deploy/mm.yaml", host)
		case !slices.Contains(s.Command, "serve") || !slices.Contains(s.Volumes, "./mm.yaml:/etc/mm/config.yaml:ro") || !slices.Contains(s.Command, "/etc/mm/config.yaml"):
			t.Errorf("deploy/compose.yaml: %s does not serve on deploy/mm.yaml: %v %v", host, s.Command, s.Volumes)
		case !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/readyz"):
			t.Errorf("deploy/compose.yaml: %s's health check is not /readyz: %v", host, s.Healthcheck.Test)
		case !slices.Contains(s.Devices, "/dev/net/tun") || !slices.Contains(s.SecurityOpt, "seccomp=unconfined") || !slices.Contains(s.SecurityOpt, "systempaths=unconfined"):
			// What mm serve's sandbox needs of Docker (docs/container.md).
			t.Errorf("deploy/compose.yaml: %s lacks what the sandbox needs (the tun device, user namespaces, /proc unmasked): %v %v", host, s.Devices, s.SecurityOpt)
		}
	}
}

// TestClusterDocConfigs: every mm config docs/cluster.md shows (its yaml
// blocks that start with cluster:, and the config.yaml of a Kubernetes
// ConfigMap) is one mm accepts.
func TestClusterDocConfigs(t *testing.T) {
	doc, err := os.ReadFile("../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	var configs []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		block := m[1]
		if strings.HasPrefix(block, "cluster:") {
			configs = append(configs, block)
			continue
		}
		if c, ok := configMapConfig(block); ok {
			configs = append(configs, c)
		}
	}
	if len(configs) < 4 {
		t.Fatalf("%d configs found in docs/cluster.md", len(configs))
	}
	for i, c := range configs {
		cfg, err := Parse([]byte(c), "docs/cluster.md")
		if err != nil {
			t.Errorf("config %d of docs/cluster.md: %v\n%s", i+1, err, c)
			continue
		}
		if !cfg.Cluster.Enabled() {
			t.Errorf("config %d of docs/cluster.md joins no cluster:\n%s", i+1, c)
		}
	}
}

// TestKubernetesManifestConfig: deploy/kubernetes.yaml's ConfigMap holds a
// config mm accepts, for a cluster on the k8s provider whose sessions are
// kept in Postgres (TestClusterOnKubernetesControlPlane, in cmd/mm, applies
// the manifest itself).
func TestKubernetesManifestConfig(t *testing.T) {
	data, err := os.ReadFile("../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, ok := configMapConfig(string(data))
	if !ok {
		t.Fatal("deploy/kubernetes.yaml has no ConfigMap with a config.yaml")
	}
	cfg, err := Parse([]byte(c), "deploy/kubernetes.yaml")
	if err != nil {
		t.Fatalf("deploy/kubernetes.yaml's config: %v\n%s", err, c)
	}
	if cfg.Cluster.Provider != "k8s" || !cfg.Sessions.Enabled || !strings.HasPrefix(cfg.Store.URL, "postgres://") {
		t.Errorf("deploy/kubernetes.yaml's config: cluster %+v, sessions.enabled %v, store.url %q", cfg.Cluster, cfg.Sessions.Enabled, cfg.Store.URL)
	}
}

// configMapConfig is the config.yaml of a ConfigMap in yaml: its
// indented lines.
func configMapConfig(yaml string) (string, bool) {
	_, rest, ok := strings.Cut(yaml, "config.yaml: |\n")
	if !ok {
		return "", false
	}
	var lines []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "    ") {
			break
		}
		lines = append(lines, strings.TrimPrefix(line, "    "))
	}
	return strings.Join(lines, "\n"), true
}

// TestKubernetesManifestRefs: everything deploy/kubernetes.yaml's
// Deployment names is made by the manifest, or by the commands its header
// gives (the secrets), and its image runs from a node that has it. On a
// real node (cmd/mm TestDeployOnKubernetesNode, run by hand) the pods
// stayed Pending on a claim nothing made, then in ErrImagePull on
// mm:latest, which the kubelet asks a registry for every time.
func TestKubernetesManifestRefs(t *testing.T) {
	data, err := os.ReadFile("../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checkManifestRefs(t, string(data))
}

// kubeObject is what checkManifestRefs reads of a manifest's object.
type kubeObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				ServiceAccountName string `yaml:"serviceAccountName"`
				Containers         []struct {
					Image           string `yaml:"image"`
					ImagePullPolicy string `yaml:"imagePullPolicy"`
					Env             []struct {
						ValueFrom struct {
							SecretKeyRef struct {
								Name string `yaml:"name"`
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
				Volumes []struct {
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
					PersistentVolumeClaim struct {
						ClaimName string `yaml:"claimName"`
					} `yaml:"persistentVolumeClaim"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func checkManifestRefs(t *testing.T, manifest string) {
	t.Helper()
	made := map[string]bool{} // Kind/name
	var deployments []kubeObject
	dec := yaml.NewDecoder(strings.NewReader(manifest))
	for {
		var o kubeObject
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes.yaml: %v", err)
		}
		made[o.Kind+"/"+o.Metadata.Name] = true
		if o.Kind == "Deployment" {
			deployments = append(deployments, o)
		}
	}
	if len(deployments) == 0 {
		t.Fatal("deploy/kubernetes.yaml has no Deployment")
	}
	// The secrets are made by the header's commands, with the token and
	// the certificates of the operator's.
	for _, m := range regexp.MustCompile(`(?m)^#.*kubectl create secret generic ([a-z0-9-]+)`).FindAllStringSubmatch(manifest, -1) {
		made["Secret/"+m[1]] = true
	}
	need := func(kind, name string) {
		if name != "" && !made[kind+"/"+name] {
			t.Errorf("deploy/kubernetes.yaml's Deployment names the %s %q, which neither the manifest nor its header makes", kind, name)
		}
	}
	for _, d := range deployments {
		s := d.Spec.Template.Spec
		need("ServiceAccount", s.ServiceAccountName)
		for _, v := range s.Volumes {
			need("ConfigMap", v.ConfigMap.Name)
			need("Secret", v.Secret.SecretName)
			need("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName)
		}
		for _, c := range s.Containers {
			for _, e := range c.Env {
				need("Secret", e.ValueFrom.SecretKeyRef.Name)
			}
			_, tag, tagged := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
			if (!tagged || tag == "latest") && c.ImagePullPolicy != "IfNotPresent" && c.ImagePullPolicy != "Never" {
				t.Errorf("deploy/kubernetes.yaml's image %q, with pull policy %q: the kubelet asks a registry for it every time, and a node that has the image cannot run it without one", c.Image, c.ImagePullPolicy)
			}
		}
	}
}
