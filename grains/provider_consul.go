//go:build consul

package grains

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/consul"
	"github.com/hashicorp/consul/api"

	"github.com/mm-agent/mm/configs"
)

// The Consul provider, with `-tags consul`.
func init() {
	providers["consul"] = func(cfg configs.Cluster, _ *slog.Logger) (cluster.ClusterProvider, error) {
		// DefaultConfig reads CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and the
		// other CONSUL_* variables.
		c := api.DefaultConfig()
		if cfg.Consul.Address != "" {
			c.Address = cfg.Consul.Address
		}
		// The check goes critical once no refresh came for the failure
		// timeout; the member refreshes it four times in that span.
		return consul.NewWithConfig(c, consul.WithTTL(cfg.FailureTimeout), consul.WithRefreshTTL(cfg.FailureTimeout/4))
	}
}
