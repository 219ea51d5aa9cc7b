package grains

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/mm-agent/mm/configs"
)

// providerHandle is the cluster provider and what Start opened for it.
type providerHandle struct {
	p     cluster.ClusterProvider
	close func() // releases what the provider's Shutdown leaves open; idempotent
	// countedOut receives, once, why this node must start again to be a
	// member again (automanaged); nil for the other providers.
	countedOut <-chan string
	// setView gives the provider the member's view of who is live and
	// who was counted out (Member.view); nil when it needs none.
	setView func(func() (live, gone []string))
}

// providers are the cluster providers this mm was built with besides
// automanaged, by name: each is in a file of its own behind the build tag of
// its name (provider_etcd.go, provider_consul.go, provider_k8s.go), so that
// the mm an editor starts links none of their clients, whose package
// initialisers alone cost an editor's process tens of milliseconds and half
// its size (docs/benchmarks.md).
var providers = map[string]func(cfg configs.Cluster, log *slog.Logger) (cluster.ClusterProvider, error){}

// providerTags are the providers a build tag adds.
var providerTags = map[string]bool{"etcd": true, "consul": true, "k8s": true}

// newProvider builds the configured provider. host is the advertised host,
// resolved from the hostname if the config left it empty.
// log is protoactor's logger, for the providers of protoactor's;
// mmLog mm's, for its own (automanaged).
func newProvider(cfg configs.Cluster, host string, sys *actor.ActorSystem, tlsc *nodeTLS, log, mmLog *slog.Logger) (*providerHandle, error) {
	switch cfg.Provider {
	case "automanaged":
		return newAutomanaged(cfg, host, sys, tlsc, mmLog)
	}
	if build, ok := providers[cfg.Provider]; ok {
		p, err := build(cfg, log)
		if err != nil {
			return nil, fmt.Errorf("cluster.%s: %w", cfg.Provider, err)
		}
		return &providerHandle{p: p, close: func() {}}, nil
	}
	if _, ok := providerTags[cfg.Provider]; ok {
		return nil, fmt.Errorf("cluster.provider %s: this mm-node was built without it: build it with `go build -tags %s ./cmd/mm-node`, or run the container image, which has every provider (docs/cluster.md)", cfg.Provider, cfg.Provider)
	}
	return nil, fmt.Errorf("cluster.provider: unknown provider %q", cfg.Provider)
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
