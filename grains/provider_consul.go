//go:build consul

package grains

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

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
		p, err := consul.NewWithConfig(c, consul.WithTTL(cfg.FailureTimeout), consul.WithRefreshTTL(cfg.FailureTimeout/4))
		if err != nil {
			return nil, err
		}
		// api.NewClient, called by NewWithConfig, left in c the HTTP
		// client the provider's client uses (its transport as the
		// address and the CONSUL_* TLS settings make it, a unix socket's
		// included); nothing has been sent yet. Its registrations are
		// paced from here.
		pace := &pacedRegistration{next: c.HttpClient.Transport, stop: make(chan struct{})}
		c.HttpClient.Transport = pace
		return pacedProvider{Provider: p, pace: pace}, nil
	}
}

// pacedProvider ends its registrations' waits as it shuts down: its
// actor, which stops only once the attempt at hand returns, is not held
// up to registrationPaceMax.
type pacedProvider struct {
	*consul.Provider
	pace *pacedRegistration
}

func (p pacedProvider) Shutdown(graceful bool) error {
	p.pace.once.Do(func() { close(p.pace.stop) })
	return p.Provider.Shutdown(graceful)
}

// pacedRegistration spaces the provider's attempts to register its
// member after one failed. protoactor's provider tries again at once,
// logging each refusal: against a Consul that refuses the node (its
// token missing or lacking service:write) it made about 2,000 attempts
// and error lines a second, a core and a log's disk burnt for nothing.
// Paced, the attempts come 0.1 s after a failure, then twice as far
// apart each time up to registrationPaceMax, and at once again after a
// success; the refusals are still logged, each one.
type pacedRegistration struct {
	next http.RoundTripper
	stop chan struct{} // closed as the provider shuts down
	once sync.Once

	mu     sync.Mutex
	failed int // registrations refused or failed in a row
}

// registrationPaceMax is the longest wait between two attempts to
// register.
const registrationPaceMax = 10 * time.Second

func (p *pacedRegistration) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/agent/service/register") {
		return p.next.RoundTrip(req)
	}
	p.mu.Lock()
	failed := p.failed
	p.mu.Unlock()
	if failed > 0 {
		wait := min(100*time.Millisecond<<min(failed-1, 10), registrationPaceMax)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.stop:
			t.Stop()
			return nil, errors.New("mm: the node is stopping")
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		}
	}
	res, err := p.next.RoundTrip(req)
	p.mu.Lock()
	if err != nil || res.StatusCode/100 != 2 {
		p.failed++
	} else {
		p.failed = 0
	}
	p.mu.Unlock()
	return res, err
}
