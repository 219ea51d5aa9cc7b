package serve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/serve/servetest"
)

// get fetches path of the server with the headers given (name, value
// pairs) and returns the status and body.
func (e *env) get(path string, headers ...string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(e.url, "/acp")+path, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdmission: /acp and /metrics need a known token and an allowed
// Origin (or none), the upgrade too; /healthz and /readyz need nothing.
// The token's name is the connection's owner.
func TestAdmission(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) {
		o.AllowedOrigins = []string{"https://editor.example"}
	})
	e.conn.clients = make(chan serve.Client, 4)
	r := e.raw()
	for _, c := range []struct {
		name    string
		headers []string
		status  int
	}{
		{"no token", []string{"Authorization", ""}, 401},
		{"another scheme", []string{"Authorization", "Basic " + token}, 401},
		{"a wrong token", []string{"Authorization", "Bearer " + token + "x"}, 401},
		{"a prefix of a token", []string{"Authorization", "Bearer " + token[:10]}, 401},
		{"a foreign origin", []string{"Origin", "https://evil.example"}, 403},
		{"a foreign origin and no token", []string{"Origin", "https://evil.example", "Authorization", ""}, 403},
		{"the null origin", []string{"Origin", "null"}, 403},
		{"the allowed origin", []string{"Origin", "https://editor.example"}, 200},
		{"the scheme in lower case", []string{"Authorization", "bearer " + token}, 200},
	} {
		resp, body := r.do(http.MethodPost, initialize, c.headers...)
		if resp.StatusCode != c.status {
			t.Errorf("POST, %s: %d %q, want %d", c.name, resp.StatusCode, body, c.status)
		}
		if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: a 401 without WWW-Authenticate", c.name)
		}
		if resp.StatusCode == 200 {
			r.id = resp.Header.Get("Acp-Connection-Id")
			r.do(http.MethodDelete, "")
			r.id = ""
		}
		status, _ := e.get("/metrics", append([]string{"Authorization", "Bearer " + token}, c.headers...)...)
		if status != c.status {
			t.Errorf("/metrics, %s: %d, want %d", c.name, status, c.status)
		}
	}
	for _, c := range []struct {
		name, token, origin string
		status              int
	}{
		{"no token", "", "", 401},
		{"a wrong token", "nope", "", 401},
		{"a foreign origin", token, "https://evil.example", 403},
		{"bob", token + "-bob", "", 101},
	} {
		h := http.Header{}
		if c.origin != "" {
			h.Set("Origin", c.origin)
		}
		ws, resp, err := servetest.DialWebSocket(context.Background(), e.ws, c.token, h)
		status := 101
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			status = resp.StatusCode
		}
		if status != c.status {
			t.Errorf("upgrade, %s: %d, want %d", c.name, status, c.status)
		}
		if ws != nil {
			ws.WriteFrame(1, []byte(initialize))
			ws.Read(make([]byte, 1))
			ws.Close()
		}
	}
	for _, want := range []serve.Client{{Token: "alice", Transport: "http"}, {Token: "alice", Transport: "http"}, {Token: "bob", Transport: "websocket"}} {
		if got := <-e.conn.clients; got != want {
			t.Errorf("Connect got %+v, want %+v", got, want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, _ := e.get(path, "Origin", "https://evil.example"); status != 200 {
			t.Errorf("%s: %d", path, status)
		}
	}
}

// TestMaxConnections: past serve.maxConnections a new connection of
// either transport gets 503, and a closed one gives its place back.
func TestMaxConnections(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MaxConnections = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	a := e.dial(serve.WebSocket, token)
	a.start(t, ctx)
	b := e.raw()
	b.init()
	if _, resp, err := servetest.DialWebSocket(ctx, e.ws, token, nil); err == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("upgrade past the limit: %v", err)
	}
	e.raw().post(initialize, 503)
	b.do(http.MethodDelete, "")
	waitFor(t, func() bool {
		resp, _ := e.raw().do(http.MethodPost, initialize)
		return resp.StatusCode == 200
	})
	_ = a.stream.Close()
}

// TestMetrics: /metrics counts connections by transport.
func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	c := e.dial(serve.WebSocket, token)
	c.start(t, ctx)
	_, body := e.get("/metrics", "Authorization", "Bearer "+token)
	for _, want := range []string{
		`mm_connections_open{transport="websocket"} 1`,
		`mm_connections_open{transport="http"} 0`,
		`mm_connections_total{transport="websocket"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	e.raw().do(http.MethodPost, initialize, "Authorization", "")
	if _, body = e.get("/metrics", "Authorization", "Bearer "+token); !strings.Contains(body, `mm_requests_refused_total{reason="token"} 1`) {
		t.Errorf("the refusal is not counted:\n%s", body)
	}
}

// TestReady: while Options.Ready says no, /readyz answers 503 and a new
// connection of either transport is refused with 503 and a Retry-After;
// once it says yes, both are let in.
func TestReady(t *testing.T) {
	var ready atomic.Bool
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.Ready = ready.Load })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	if status, body := e.get("/readyz"); status != 503 || body != "not ready" {
		t.Errorf("/readyz before ready: %d %q", status, body)
	}
	if status, _ := e.get("/healthz"); status != 200 {
		t.Errorf("/healthz before ready: %d", status)
	}
	if _, resp, err := servetest.DialWebSocket(ctx, e.ws, token, nil); err == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("an upgrade before ready: %v", err)
	}
	e.raw().post(initialize, 503)
	ready.Store(true)
	if status, _ := e.get("/readyz"); status != 200 {
		t.Errorf("/readyz once ready: %d", status)
	}
	c := e.dial(serve.WebSocket, token)
	c.start(t, ctx)
	e.raw().post(initialize, 200)
	if _, body := e.get("/metrics", "Authorization", "Bearer "+token); !strings.Contains(body, `mm_requests_refused_total{reason="unready"} 2`) {
		t.Errorf("the refusals are not counted:\n%s", body)
	}
	_ = c.stream.Close()
}

// TestDrain: once Serve's context ends, /readyz answers 503 and new
// connections are refused; an idle connection ends at once, one with a
// turn in flight after DrainTimeout, its turn cancelled; Serve returns.
// The turn's model never answers ("slow" stalls), so DrainTimeout is the
// only way the busy connection ends: the log's reasons tell which way each
// ended, and the times are logged.
func TestDrain(t *testing.T) {
	testwait.Short(t, "a drain that waits for serve.drainTimeout")
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.DrainTimeout = time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	idle := e.raw()
	idle.init()
	idleStream := idle.stream("", 200)
	busy := e.dial(serve.WebSocket, token)
	sid := busy.start(t, ctx)
	answered := make(chan acp.PromptResponse, 1)
	go func() {
		resp, _ := busy.ask(ctx, sid, "slow")
		answered <- resp
	}()
	if err := busy.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	served := make(chan error, 1)
	go func() { served <- e.stop(testwait.Hang) }()
	waitFor(t, func() bool { s, _ := e.get("/readyz"); return s == 503 })
	if !idleStream.ended() {
		t.Error("the idle connection did not end")
	}
	t.Logf("the idle connection ended %v after the drain began", time.Since(start))
	if _, resp, err := servetest.DialWebSocket(ctx, e.ws, token, nil); err == nil || resp.StatusCode != 503 {
		t.Errorf("a new connection while draining: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	t.Logf("Serve returned %v after the drain began (serve.drainTimeout 1s)", time.Since(start))
	log := e.stderr.String()
	for _, want := range []string{
		"[serve] http connection of alice closed: the server is shutting down conn=",
		"[serve] websocket connection of alice closed: the server is shutting down (serve.drainTimeout) conn=",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	select {
	case resp := <-answered:
		if resp.StopReason != acp.StopReasonCancelled && !strings.Contains(acptest.Text(busy.rec.Updates(sid)), "thinking") {
			t.Errorf("the turn ended %q", resp.StopReason)
		}
	case <-ctx.Done():
		t.Fatal("the turn was not answered")
	}
}

// TestDrainWithRequestsWaiting: a connection whose client sent more
// requests than acp.maxPending while a turn never ends — mm's reader waits
// for a place with a request in hand, and reads nothing more — still ends
// at serve.drainTimeout, and Serve returns: the request waiting is
// answered with an error, the turn cancelled. (Issue 42: mm's reader
// waited for the turn, the turn for nothing the drain could stop; the
// server stayed draining.)
func TestDrainWithRequestsWaiting(t *testing.T) {
	testwait.Short(t, "a drain that waits for serve.drainTimeout")
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, func(o *serve.Options, c *configs.Config) {
				o.DrainTimeout = time.Second
				c.ACP.MaxPending = 1
			})
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
			defer cancel()
			c := e.dial(transport, token)
			sid := c.start(t, ctx)
			go func() { _, _ = c.ask(ctx, sid, "slow") }()
			if err := c.rec.WaitUpdate(ctx, sid, func(u acp.SessionUpdate) bool { return u.AgentMessageChunk != nil }); err != nil {
				t.Fatal(err)
			}
			listed := make(chan error, 1)
			go func() {
				_, err := c.ListSessions(ctx, acp.ListSessionsRequest{})
				listed <- err
			}()
			// On its way: read, waiting for mm or in mm's hands (its room
			// is held until mm has served it).
			waitFor(t, func() bool { return incomingBytes(t, e) > 0 })
			start := time.Now()
			if err := e.stop(testwait.Hang); err != nil {
				t.Fatalf("Serve did not return: %v", err)
			}
			t.Logf("Serve returned %v after the drain began (serve.drainTimeout 1s)", time.Since(start).Round(time.Millisecond))
			select {
			case err := <-listed:
				if err == nil {
					t.Error("the request waiting for a place was answered as served")
				}
				t.Logf("the request waiting for a place: %v", err)
			case <-ctx.Done():
				t.Error("the request waiting for a place was not answered")
			}
		})
	}
}

// TestHTTP2: the streamable HTTP transport works over HTTP/2 without TLS
// (h2c with prior knowledge).
func TestHTTP2(t *testing.T) {
	e := newEnv(t, nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: &protoCheck{t: t, rt: tr}}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	c := newClient(t, servetest.DialHTTP(e.url, token, client))
	sid := c.start(t, ctx)
	if resp, err := c.ask(ctx, sid, "ping"); err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("%v %v", resp, err)
	}
}

// protoCheck fails the test on a response that is not HTTP/2.
type protoCheck struct {
	t  *testing.T
	rt http.RoundTripper
}

func (p *protoCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(r)
	if err == nil && resp.ProtoMajor != 2 {
		p.t.Errorf("%s %s over %s", r.Method, r.URL, resp.Proto)
	}
	return resp, err
}

// TestTLS: with a certificate, both transports are served over TLS
// (https, wss), HTTP/2 negotiated for the HTTP one.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.CertFile, o.KeyFile = certFile, keyFile })
	if !e.srv.TLS() {
		t.Fatal("TLS() is false")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: &protoCheck{t: t, rt: tr}}
	https := "https" + strings.TrimPrefix(e.url, "http")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	c := newClient(t, servetest.DialHTTP(https, token, client))
	sid := c.start(t, ctx)
	if resp, err := c.ask(ctx, sid, "ping"); err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("https: %v %v", resp, err)
	}
	wsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ws, _, err := servetest.DialWebSocketWith(ctx, "wss"+strings.TrimPrefix(e.ws, "ws"), token, nil, wsClient)
	if err != nil {
		t.Fatal(err)
	}
	c = newClient(t, ws)
	sid = c.start(t, ctx)
	if resp, err := c.ask(ctx, sid, "ping"); err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("wss: %v %v", resp, err)
	}
	// Plain HTTP on the TLS port is no way in.
	if resp, err := http.Post(e.url, "application/json", strings.NewReader(initialize)); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was served on the TLS port")
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mm test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile, pool
}

// TestStall: a client that stops reading in the middle of a large answer
// is disconnected after the stall timeout, on either transport; over HTTP
// mm's writer waits once the connection's streams hold MaxBufferedBytes.
func TestStall(t *testing.T) {
	testwait.Short(t, "clients cut off after the stall timeout")
	e := newEnv(t, func(o *serve.Options, c *configs.Config) {
		// The paused client never reads again, so the limit is its only
		// way out; the limit also bounds what a reading client does before
		// it pauses (the streams opened, initialize answered), which must
		// fit in it on a loaded machine.
		o.StallTimeout = stallBound
		o.MaxBufferedBytes = 64 << 10
		c.Model.Script = writeScript(t, bigScript())
	})
	for i, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
			defer cancel()
			p := &pausable{}
			var s servetest.Stream
			if tr == serve.WebSocket {
				ws, _, err := servetest.DialWebSocket(ctx, e.ws, token, nil)
				if err != nil {
					t.Fatal(err)
				}
				s = ws
			} else {
				s = servetest.DialHTTP(e.url, token, nil)
			}
			p.Stream = s
			c := newClient(t, p)
			sid := c.start(t, ctx)
			p.pause()
			answered := make(chan error, 1)
			go func() {
				_, err := c.ask(ctx, sid, "big")
				answered <- err
			}()
			waitFor(t, func() bool {
				return strings.Count(e.stderr.String(), "closed: the client read nothing for serve.stallTimeout") > i
			})
			p.resume()
			if err := <-answered; err == nil {
				t.Error("a client cut off got its answer")
			}
		})
	}
}

// TestStallHTTPWrite: a streamable HTTP client that stops reading at its
// sockets in the middle of a large answer, while the connection's
// streams have room for all of it (MaxBufferedBytes), is cut off when an
// event's write has waited the stall timeout. net/http cancels the
// request's context on that write's error itself: the stall is the
// deadline, whatever the context says.
func TestStallHTTPWrite(t *testing.T) {
	testwait.Short(t, "a client cut off after the stall timeout")
	e := newEnv(t, func(o *serve.Options, c *configs.Config) {
		o.StallTimeout = stallBound
		o.MaxBufferedBytes = 1 << 30
		c.Model.Script = writeScript(t, bigScript())
	})
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
	defer cancel()
	p := &pausable{}
	tr := &http.Transport{DialContext: servetest.PausingDialer(p.wait)}
	defer tr.CloseIdleConnections()
	p.Stream = servetest.DialHTTP(e.url, token, &http.Client{Transport: tr})
	c := newClient(t, p)
	sid := c.start(t, ctx)
	p.pause()
	held := true
	defer func() {
		if held {
			p.resume() // the test failed: the client's goroutines go
		}
	}()
	answered := make(chan error, 1)
	go func() {
		_, err := c.ask(ctx, sid, "big")
		answered <- err
	}()
	waitFor(t, func() bool {
		return strings.Contains(e.stderr.String(), "closed: the client read nothing for serve.stallTimeout")
	})
	held = false
	p.resume()
	if err := <-answered; err == nil {
		t.Error("a client cut off got its answer")
	}
}

// pausable is a stream whose reading can be held.
type pausable struct {
	servetest.Stream
	mu   sync.Mutex
	held chan struct{}
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.held = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) resume() {
	p.mu.Lock()
	close(p.held)
	p.held = nil
	p.mu.Unlock()
}

func (p *pausable) Read(b []byte) (int, error) {
	p.wait()
	return p.Stream.Read(b)
}

// wait returns once p is not held.
func (p *pausable) wait() {
	p.mu.Lock()
	h := p.held
	p.mu.Unlock()
	if h != nil {
		<-h
	}
}
