package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The mm an editor starts (the default build: mm -acp, mm connect, mm --ask)
// links no cluster provider's client: their package initialisers alone
// made its start-up slower than its peers' (docs/benchmarks.md). They come
// with -tags etcd, consul, k8s (docs/cluster.md).
func TestEditorBinaryLinksNoClusterProvider(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/mm-agent/mm/cmd/mm").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "go.etcd.io/", "github.com/hashicorp/consul"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the default build imports %s", pkg)
			}
		}
	}
}
