package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/kubelet"
	"github.com/mm-agent/mm/internal/testwait"
)

// TestHiddenThroughKubeletLinks: a secret Kubernetes mounts in a pod is
// links — node-key.pem -> ..data/node-key.pem, ..data -> ..2026_…, the
// folder that holds the files, swapped whole when the secret changes — and
// mm hides the path its config names (cluster.tls's key, a link). Through
// each name, with bubblewrap and with Landlock, a command reads the
// secret's other files and not the hidden one; nor, once the secret is
// changed in place while it runs (a new folder, ..data pointed at it),
// the new key: a long-lived command (an MCP server) would wait for that.
// The secret is inside a config map that holds mm's config, hidden too,
// as deploy/kubernetes.yaml mounts them.
func TestHiddenThroughKubeletLinks(t *testing.T) {
	for _, c := range []struct {
		name string
		s    func(*testing.T) *Sandbox
	}{{"bubblewrap", confining}, {"landlock", landlocked}} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s(t)
			// As deploy/kubernetes.yaml mounts them: the config map at
			// /etc/mm, the cluster's secret inside it at /etc/mm/cluster.
			conf := outsideDir(t)
			secret := filepath.Join(conf, "cluster")
			if err := os.Mkdir(secret, 0o755); err != nil {
				t.Fatal(err)
			}
			kubeletWrite(t, conf, "..2026_12_06_16_50_00.1", map[string]string{"config.yaml": "TOKENS"})
			kubeletWrite(t, secret, "..2026_12_06_16_50_00.1", map[string]string{"node-key.pem": "PRIVATE", "ca.pem": "PUBLIC"})
			key, config := filepath.Join(secret, "node-key.pem"), filepath.Join(conf, "config.yaml")
			cwd := workDir(t)
			names := key + " " + filepath.Join(secret, "..data", "node-key.pem") + " " + filepath.Join(secret, "..2026*", "node-key.pem") +
				" " + config + " " + filepath.Join(conf, "..data", "config.yaml") + " " + filepath.Join(conf, "..2026*", "config.yaml")
			ready, goOn := filepath.Join(cwd, "ready"), filepath.Join(cwd, "go")
			script := "cat " + filepath.Join(secret, "ca.pem") + "; echo; cat " + names + "; touch " + ready +
				"; while [ ! -e " + goOn + " ]; do sleep 0.02; done; cat " + names
			// The secret's key first: a folder's own mount must not cover
			// what is mounted inside it.
			p := Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}, Hidden: []string{key, config}, Temp: filepath.Join(workDir(t), "tmp"), User: tenant}
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = cwd
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			started, err := s.Wrap(cmd, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			started()
			deadline := time.Now().Add(testwait.Hang)
			for _, err := os.Stat(ready); err != nil; _, err = os.Stat(ready) {
				if time.Now().After(deadline) {
					t.Fatalf("the command did not start: %q", out.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The kubelet changes both in place.
			kubeletWrite(t, secret, "..2026_12_06_16_51_00.2", map[string]string{"node-key.pem": "ROTATED", "ca.pem": "PUBLIC"})
			kubeletWrite(t, conf, "..2026_12_06_16_51_00.2", map[string]string{"config.yaml": "NEW-TOKENS"})
			if err := os.WriteFile(goOn, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if o := out.String(); strings.Contains(o, "PRIVATE") || strings.Contains(o, "ROTATED") || strings.Contains(o, "TOKENS") || !strings.Contains(o, "PUBLIC") {
				t.Errorf("want the secret's ca.pem read and its hidden key and the config not, through every name, before and after they changed: %q", o)
			}
		})
	}
}

// kubeletWrite is kubelet.Write, the folder then the tenant's.
func kubeletWrite(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	if err := kubelet.Write(dir, stamp, files); err != nil {
		t.Fatal(err)
	}
	own(t, dir)
}
