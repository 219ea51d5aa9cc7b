//go:build !nok8s

package grains

import (
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
)

// newK8s is the Kubernetes provider, on the in-cluster configuration; the
// namespace is the pod's service account's (the provider reads it, and
// takes no other). The Kubernetes client is about half of mm's binary:
// `-tags nok8s` leaves it out (provider_nok8s.go).
func newK8s() (cluster.ClusterProvider, error) { return k8s.New() }
