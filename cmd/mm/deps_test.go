package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The mm an editor starts (mm -acp, mm connect, mm --ask) links no cluster:
// the package initialisers of the providers' clients alone made its
// start-up slower than its peers', and protoactor's cluster, its gRPC
// remote and the grains cost it about 0.7 ms of initialisers and 7 MB
// (docs/benchmarks.md). mm-node links them (automanaged always, the other
// providers with -tags etcd, consul, k8s; docs/cluster.md).
func TestEditorBinaryLinksNoCluster(t *testing.T) {
	mm := deps(t, "github.com/mm-agent/mm/cmd/mm")
	for _, pkg := range mm {
		for _, banned := range []string{
			"k8s.io/", "sigs.k8s.io/", "go.etcd.io/", "github.com/hashicorp/consul",
			"github.com/asynkron/protoactor-go/cluster", "github.com/asynkron/protoactor-go/remote",
			"google.golang.org/grpc", "github.com/mm-agent/mm/grains",
		} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("mm, the editor's binary, imports %s", pkg)
			}
		}
	}
	// mm-node, untagged, is a member with automanaged peers (mm's own
	// provider, grains/automanaged.go), and nothing more: mm serve on a
	// cluster config runs it.
	node := deps(t, "github.com/mm-agent/mm/cmd/mm-node")
	for _, want := range []string{"github.com/mm-agent/mm/grains", "github.com/asynkron/protoactor-go/cluster"} {
		if !slices.Contains(node, want) {
			t.Errorf("mm-node does not import %s", want)
		}
	}
	for _, pkg := range node {
		for _, banned := range []string{"k8s.io/", "go.etcd.io/", "github.com/hashicorp/consul"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("mm-node's default build imports %s", pkg)
			}
		}
	}
}

func deps(t *testing.T, pkg string) []string {
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// TestConnectLinksNoAgent: mm connect's bridge speaks JSON-RPC (package
// jsonrpc) and WebSocket; it links neither mm's agent side (protocol) nor
// the actor system. It imported all of protocol, 441 packages, for one
// function (issue 27).
func TestConnectLinksNoAgent(t *testing.T) {
	for _, pkg := range deps(t, "github.com/mm-agent/mm/connect") {
		for _, banned := range []string{"github.com/mm-agent/mm/protocol", "github.com/mm-agent/mm/actors", "github.com/asynkron/protoactor-go"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("connect imports %s", pkg)
			}
		}
	}
}
