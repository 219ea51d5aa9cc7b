// Command mm-node is mm with the cluster: everything mm does, and `mm-node
// serve` (or `mm serve`, which runs it) as a node of a protoactor cluster
// when the config names one (cluster.name; docs/cluster.md). The providers
// other than automanaged are linked with build tags of their names:
// go build -tags etcd,consul,k8s ./cmd/mm-node.
package main

import (
	"log/slog"
	"os"

	"github.com/mm-agent/mm/cmd/internal/cli"
	"github.com/mm-agent/mm/grains"
	"github.com/mm-agent/mm/sandbox"
)

func main() {
	// mm is also the helper that confines a command with Landlock
	// (package sandbox): that process does nothing else.
	sandbox.Main()
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, func(log *slog.Logger) cli.Node {
		return grains.NewNode(log)
	}))
}
