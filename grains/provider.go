package grains

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/consul"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/hashicorp/consul/api"
	"github.com/labstack/echo"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mm-agent/mm/configs"
)

// providerHandle is the cluster provider and what Start opened for it.
type providerHandle struct {
	p     cluster.ClusterProvider
	close func() // releases what the provider's Shutdown leaves open; idempotent
}

// newProvider builds the configured provider. host is the advertised host,
// resolved from the hostname if the config left it empty.
func newProvider(cfg configs.Cluster, host string, sys *actor.ActorSystem, log *slog.Logger) (*providerHandle, error) {
	switch cfg.Provider {
	case "automanaged":
		return newAutomanaged(cfg, host, sys, log)
	case "etcd":
		p, err := etcd.NewWithConfig(cfg.Etcd.Prefix, clientv3.Config{
			Endpoints:   cfg.Etcd.Endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zapTo(log),
		})
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd: %w", err)
		}
		return &providerHandle{p: p, close: func() {}}, nil
	case "consul":
		// DefaultConfig reads CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and the
		// other CONSUL_* variables.
		c := api.DefaultConfig()
		if cfg.Consul.Address != "" {
			c.Address = cfg.Consul.Address
		}
		// The check goes critical once no refresh came for the failure
		// timeout; the member refreshes it four times in that span.
		p, err := consul.NewWithConfig(c, consul.WithTTL(cfg.FailureTimeout), consul.WithRefreshTTL(cfg.FailureTimeout/4))
		if err != nil {
			return nil, fmt.Errorf("cluster.consul: %w", err)
		}
		return &providerHandle{p: p, close: func() {}}, nil
	case "k8s":
		p, err := newK8s()
		if err != nil {
			return nil, fmt.Errorf("cluster.provider k8s: %w", err)
		}
		return &providerHandle{p: p, close: func() {}}, nil
	}
	return nil, fmt.Errorf("cluster.provider: unknown provider %q", cfg.Provider)
}

// newAutomanaged builds the automanaged provider on a health endpoint of
// mm's making. protoactor's own would listen on every interface and print
// its start on stdout (echo's banner line), and a taken port would only
// show in a log line; this one listens on the advertised host, says
// nothing, and a taken port fails Start.
func newAutomanaged(cfg configs.Cluster, host string, sys *actor.ActorSystem, log *slog.Logger) (*providerHandle, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.HealthPort)))
	if err != nil {
		return nil, fmt.Errorf("cluster.healthPort: %w", err)
	}
	self := ln.Addr().(*net.TCPAddr)
	hosts := []string{self.String()}
	for _, p := range cfg.Peers {
		if !isSelf(p, self) {
			hosts = append(hosts, p)
		}
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Listener = ln
	e.Logger.SetOutput(logWriter{log}) // echo's own logger defaults to stdout
	e.StdLogger = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	// Polling four times in the failure timeout declares a member gone
	// within it once its endpoint refuses, as a dead process's does; a
	// host that swallows packets costs protoactor's HTTP timeout (2 s) more.
	p := automanaged.NewWithTesting(cfg.FailureTimeout/4, cfg.HealthPort, e, hosts...)
	e.GET("/_health", func(ctx echo.Context) error {
		// What the provider's own endpoint answers (getCurrentNode); it is
		// served only once StartMember has started the remote and the
		// kinds.
		h, port, err := sys.GetHostPort()
		if err != nil {
			return ctx.NoContent(http.StatusServiceUnavailable)
		}
		c := cluster.GetCluster(sys)
		return ctx.JSON(http.StatusOK, automanaged.NewNode(c.Config.Name, sys.ID, h, port, cfg.HealthPort, c.GetClusterKinds()))
	})
	return &providerHandle{p: p, close: func() {
		_ = e.Close()
		_ = ln.Close()
	}}, nil
}

// isSelf says whether the peer host:port is this node's health endpoint:
// written as it listens, or a name that resolves to its address.
func isSelf(peer string, self *net.TCPAddr) bool {
	if peer == self.String() {
		return true
	}
	h, p, err := net.SplitHostPort(peer)
	if err != nil || p != strconv.Itoa(self.Port) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, h)
	if err != nil {
		return false // a peer not yet resolvable (a container not yet up) is not this one
	}
	for _, ip := range ips {
		if ip.IP.Equal(self.IP) {
			return true
		}
	}
	return false
}

// logWriter makes each write a warning on log: for libraries that print
// their troubles to a writer.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn(string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

// zapTo is a zap logger (the etcd client's) whose warnings and errors
// become lines of log.
func zapTo(log *slog.Logger) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = ""
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(logWriter{log.With("lib", "etcd")}), zapcore.WarnLevel)
	return zap.New(core)
}
