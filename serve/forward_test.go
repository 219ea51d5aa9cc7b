package serve_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/serve/servetest"
)

// table is the membership as a node sees it: its own tag, and where each
// other live node serves.
type table struct {
	tag   string
	nodes map[string]peerAt
}

type peerAt struct {
	url string
	pin []byte
}

func (p *table) Tag() string { return p.tag }

func (p *table) Peer(tag string) (string, []byte, bool) {
	at, ok := p.nodes[tag]
	return at.url, at.pin, ok
}

// balancer sends every request that names a connection to another node,
// as a balancer without affinity may.
type balancer struct {
	rt   http.RoundTripper
	host string
}

func (b *balancer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Acp-Connection-Id") != "" {
		r = r.Clone(r.Context())
		r.URL.Host = b.host
		r.Host = b.host
	}
	return b.rt.RoundTrip(r)
}

func pinOf(der []byte) []byte {
	sum := sha256.Sum256(der)
	return sum[:]
}

// TestForwardToTheNodeThatHoldsTheConnection: two nodes serving https, each
// with a certificate of its own. A streamable HTTP connection opened on
// node a carries a's tag in its id, and every request after initialize
// that a balancer sends to node b — the session's opening, a turn, its
// SSE stream — is passed on by b to a, whose certificate b takes only for
// the pin a gossips: the client sees one connection. A node b that has a
// wrong pin for a answers 502 and a gets nothing; a node b that does not
// know a answers 404, as for a connection that is gone.
func TestForwardToTheNodeThatHoldsTheConnection(t *testing.T) {
	certA, keyA, _ := selfSigned(t)
	certB, keyB, _ := selfSigned(t)
	pool := x509.NewCertPool()
	for _, f := range []string{certA, certB} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(b)
	}
	a := newEnv(t, func(o *serve.Options, _ *configs.Config) {
		o.CertFile, o.KeyFile = certA, keyA
		o.Peers = &table{tag: "a"}
	})
	https := func(u string) string { return "https" + strings.TrimPrefix(u, "http") }
	hostOf := func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return p.Host
	}
	nodeB := func(pin []byte) *env {
		return newEnv(t, func(o *serve.Options, _ *configs.Config) {
			o.CertFile, o.KeyFile = certB, keyB
			nodes := map[string]peerAt{}
			if pin != nil {
				nodes["a"] = peerAt{url: "https://" + hostOf(a.url), pin: pin}
			}
			o.Peers = &table{tag: "b", nodes: nodes}
		})
	}
	b := nodeB(pinOf(a.srv.CertDER()))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()

	hc := servetest.DialHTTP(https(a.url), token, &http.Client{Transport: &balancer{rt: tr, host: hostOf(b.url)}})
	c := newClient(t, hc)
	sid := c.start(t, ctx)
	if id := hc.ConnectionID(); !strings.HasSuffix(id, ".a") {
		t.Errorf("node a's connection id %q does not end with its tag", id)
	}
	if resp, err := c.ask(ctx, sid, "ping"); err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a turn through node b: %v %v", resp, err)
	}
	if got := forwarded(t, b.srv, "forwarded"); got < 3 {
		t.Errorf("node b passed on %v requests, want the opening, the turn and the stream at least", got)
	}
	if n := len(strings.Split(a.stderr.String(), "opened")); n < 2 {
		t.Errorf("node a did not serve the connection:\n%s", a.stderr.String())
	}

	post := func(e *env, id string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, https(e.url), strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"session/list","params":{}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Acp-Connection-Id", id)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	wrong := nodeB(pinOf(b.srv.CertDER()))
	if got := post(wrong, hc.ConnectionID()); got != http.StatusBadGateway {
		t.Errorf("node b with a wrong pin for a: %d, want 502", got)
	}
	if !strings.Contains(wrong.stderr.String(), "a certificate other than the one it gossips") {
		t.Errorf("node b did not say why:\n%s", wrong.stderr.String())
	}
	if got := post(nodeB(nil), hc.ConnectionID()); got != http.StatusNotFound {
		t.Errorf("node b that does not know a: %d, want 404", got)
	}
}

// forwarded is the server's mm_requests_forwarded_total of outcome.
func forwarded(t *testing.T, s *serve.Server, outcome string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mm_requests_forwarded_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
