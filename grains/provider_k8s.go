//go:build k8s

package grains

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mm-agent/mm/configs"
)

// The Kubernetes provider, with `-tags k8s`, on the in-cluster
// configuration; the namespace is the pod's service account's (the provider
// reads it, and takes no other). The Kubernetes client is about half of the
// size of an mm that has it.
func init() {
	providers["k8s"] = func(_ configs.Cluster, log *slog.Logger) (cluster.ClusterProvider, error) {
		config, err := rest.InClusterConfig()
		if err != nil {
			return nil, err
		}
		p, err := k8s.NewWithConfig(config)
		if err != nil {
			return nil, err
		}
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			return nil, err
		}
		return &k8sProvider{Provider: p, client: client}, nil
	}
}

// k8sProvider is protoactor's, which lists each pod as a member under
// the id its label cluster.proto.actor/member-id gives. It writes there
// an id of its own making (a random UUID) unless the pod has that label
// already, in which case it keeps the pod's. But the cluster's gossip,
// and mm with it (placement, serve.Peers), know a member by its actor
// system's id (a connection's id ends with its node's): under the
// provider's own, no node would find itself in the list, nor another
// node by a connection's id, and protoactor's gossip took each node's
// requests for an unknown member's. And a pod whose
// container was killed kept its labels, so that its next start came back
// under the id of the last, which the cluster may have counted out for
// good. So this node labels its pod with its actor system's id first.
type k8sProvider struct {
	*k8s.Provider
	client kubernetes.Interface
}

// StartMember labels this pod with the actor system's id as its member
// id, then starts protoactor's provider, which keeps that label.
func (p *k8sProvider) StartMember(c *cluster.Cluster) error {
	if err := p.label(c.ActorSystem.ID); err != nil {
		return err
	}
	return p.Provider.StartMember(c)
}

// label sets this pod's member-id label to id (a merge patch: the
// pod's other labels stay).
func (p *k8sProvider) label(id string) error {
	name, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("k8s: this pod's name (its hostname): %w", err)
	}
	ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return fmt.Errorf("k8s: this pod's namespace: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{k8s.LabelMemberID: id}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.client.CoreV1().Pods(strings.TrimSpace(string(ns))).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("k8s: labelling pod %s with its member id: %w", name, err)
	}
	return nil
}
