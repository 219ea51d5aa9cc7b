//go:build k8s

package grains

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"

	"github.com/mm-agent/mm/configs"
)

// The Kubernetes provider, with `-tags k8s`, on the in-cluster
// configuration; the namespace is the pod's service account's (the provider
// reads it, and takes no other). The Kubernetes client is about half of the
// size of an mm that has it.
func init() {
	providers["k8s"] = func(configs.Cluster, *slog.Logger) (cluster.ClusterProvider, error) { return k8s.New() }
}
