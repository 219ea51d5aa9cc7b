//go:build etcd

package grains

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mm-agent/mm/configs"
)

// The etcd provider, with `-tags etcd`: members register under
// cluster.etcd.prefix on cluster.etcd.endpoints.
func init() {
	providers["etcd"] = func(cfg configs.Cluster, log *slog.Logger) (cluster.ClusterProvider, error) {
		return etcd.NewWithConfig(cfg.Etcd.Prefix, clientv3.Config{
			Endpoints:   cfg.Etcd.Endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zapTo(log),
		})
	}
}

// zapTo is a zap logger (the etcd client's) whose warnings and errors
// become lines of log.
func zapTo(log *slog.Logger) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = ""
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(logWriter{log.With("lib", "etcd")}), zapcore.WarnLevel)
	return zap.New(core)
}
