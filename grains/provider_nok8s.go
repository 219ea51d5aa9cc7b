//go:build nok8s

package grains

import (
	"errors"

	"github.com/asynkron/protoactor-go/cluster"
)

// newK8s refuses: this mm was built without the Kubernetes client.
func newK8s() (cluster.ClusterProvider, error) {
	return nil, errors.New("this mm was built with -tags nok8s, without the Kubernetes provider")
}
