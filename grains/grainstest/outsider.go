// Package grainstest holds a peer for the tests of mm's cluster written to
// hurt it: an outsider that speaks protoactor's remote, and mm's own
// messages, to a node as any program that reaches the cluster's port
// could — no certificate of the cluster's CA, and no token; or, given the
// cluster's certificate (a tenant's command that read node-key.pem), a
// member that holds no token.
package grainstest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/grains/grainspb"
)

// Outsider is a protoactor system with a remote of its own, and an edge
// actor that keeps what a session it reached writes back to it.
type Outsider struct {
	sys  *actor.ActorSystem
	r    *remote.Remote
	edge *actor.PID

	mu    sync.Mutex
	texts strings.Builder
	ids   []string
	items []string
}

// NewOutsider starts an outsider whose remote listens on listen
// (host:port; port 0 picks one): without TLS when tlsDir is empty, else
// with the cluster's mutual TLS and the certificate in tlsDir (the files
// of `mm cluster-certs`), as a member.
func NewOutsider(listen, tlsDir string) (*Outsider, error) {
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, err
	}
	// protoactor's default logger writes to the console: the test's
	// output is not its place.
	o := &Outsider{sys: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))}
	var opts []remote.ConfigOption
	if tlsDir != "" {
		server, client, err := clustertls.Load(configs.ClusterTLS{Cert: filepath.Join(tlsDir, clustertls.CertFile),
			Key: filepath.Join(tlsDir, clustertls.KeyFile), CA: filepath.Join(tlsDir, clustertls.CAFile)})
		if err != nil {
			return nil, err
		}
		opts = append(opts, remote.WithServerOptions(grpc.Creds(credentials.NewTLS(server))),
			remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(client))))
	}
	o.r = remote.NewRemote(o.sys, remote.Configure(host, port, opts...))
	started := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				started <- fmt.Errorf("remote: %v", p)
			}
		}()
		o.r.Start()
		started <- nil
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	o.edge = o.sys.Root.Spawn(actor.PropsFromFunc(o.receive))
	return o, nil
}

func (o *Outsider) receive(ctx actor.Context) {
	outs, ok := ctx.Message().(*grainspb.Outs)
	if !ok {
		return
	}
	link := actor.NewPID(outs.Link.GetAddress(), outs.Link.GetId())
	for _, m := range outs.Items {
		o.out(ctx, link, m)
	}
}

// out takes one of the Outs. It answers as a client's node would, so that
// the session goes on: the bytes written given back, a marker reached.
func (o *Outsider) out(ctx actor.Context, link *actor.PID, m *grainspb.Out) {
	if m.Cost > 0 {
		ctx.Send(link, &grainspb.Credit{SessionId: m.SessionId, Bytes: m.Cost})
	}
	if d, ok := m.Item.(*grainspb.Out_Deliver); ok {
		ctx.Send(link, &grainspb.Delivered{Number: d.Deliver})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch it := m.Item.(type) {
	case *grainspb.Out_Chunk:
		o.texts.WriteString(it.Chunk)
		o.items = append(o.items, "chunk")
	case *grainspb.Out_Response:
		o.ids = append(o.ids, string(it.Response.Id))
		o.items = append(o.items, fmt.Sprintf("response %s %s %s", it.Response.Id, it.Response.Result, it.Response.Error))
	case *grainspb.Out_Update:
		o.items = append(o.items, "update "+string(it.Update))
	default:
		o.items = append(o.items, fmt.Sprintf("%T", m.Item))
	}
}

// Items says what the outsider was written, in order, for a test's
// message.
func (o *Outsider) Items() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.items...)
}

// Written is what the sessions the outsider reached wrote back to it: the
// text of their chunks, and the ids of the requests they answered.
func (o *Outsider) Written() (text string, answered []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.texts.String(), append([]string(nil), o.ids...)
}

// Activate asks the node at address (its remote) for the grain of session
// sid, as protoactor's identity lookup does; it returns the grain's PID.
func (o *Outsider) Activate(address, sid string, timeout time.Duration) (*actor.PID, error) {
	req := &cluster.ActivationRequest{ClusterIdentity: &cluster.ClusterIdentity{Identity: sid, Kind: "session"}, RequestId: sid}
	res, err := o.sys.Root.RequestFuture(actor.NewPID(address, "partition-activator"), req, timeout).Result()
	if err != nil {
		return nil, err
	}
	a, ok := res.(*cluster.ActivationResponse)
	if !ok || a.Pid == nil {
		return nil, fmt.Errorf("the node answered %T %v", res, res)
	}
	return a.Pid, nil
}

// Call sends a session's grain a call as the client's node of owner, its
// answers to come back to the outsider.
func (o *Outsider) Call(grain *actor.PID, seq uint64, owner, method, id string, sid string, params func(*grainspb.Call), timeout time.Duration) error {
	c := &grainspb.Call{Conn: &grainspb.Conn{Address: o.edge.Address, Id: o.edge.Id}, Seq: seq, Owner: owner,
		Method: method, Id: []byte(id), SessionId: sid}
	if params != nil {
		params(c)
	}
	res, err := o.sys.Root.RequestFuture(grain, c, timeout).Result()
	if err != nil {
		return err
	}
	a, ok := res.(*grainspb.Accepted)
	if !ok {
		return fmt.Errorf("the grain answered %T", res)
	}
	if a.Refused != "" {
		return errors.New(a.Refused)
	}
	return nil
}

// ServeHealth answers the automanaged polls at addr (a health port) as a
// member of cluster whose remote is the outsider's, over HTTPS with cert
// when it is set, plain HTTP otherwise. It returns how to stop it.
func (o *Outsider) ServeHealth(addr, clusterName string, cert *tls.Certificate) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})
	}
	host, port, _ := o.sys.GetHostPort()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "outsider-" + o.sys.ID, "address": host, "port": port,
			"auto_manage_port": 0, "kinds": []string{"session"}, "cluster_name": clusterName})
	})}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// Close stops the outsider.
func (o *Outsider) Close() {
	o.r.Shutdown(false)
	o.sys.Shutdown()
}

// The outsider runs as a process of its own (Main), as the program of
// issue 28 did: protoactor's remote, in the test's own process, would
// bring its races into the test's race detector.

// Env, set in a test binary's environment, makes Main play the outsider:
// "attack" (Attack on OUTSIDER_NODE with OUTSIDER_CWD, its result as JSON
// on stdout), "member" (Member on OUTSIDER_NODE with the certificate in
// OUTSIDER_TLS, against the session OUTSIDER_SESSION of OUTSIDER_OWNER in
// OUTSIDER_CWD) or "steal" (ServeHealth: a remote on OUTSIDER_LISTEN and a
// health endpoint on OUTSIDER_HEALTH answering over HTTPS with
// OUTSIDER_CERT and OUTSIDER_KEY, "ready" on stdout, until stdin ends,
// then what it was written as JSON).
const Env = "MM_TEST_OUTSIDER"

// Result is what an outsider got.
type Result struct {
	Text     string   `json:"text"`
	Answered []string `json:"answered"`
	Err      string   `json:"err,omitempty"`
	// Items is what it was written, in order (the chunks' text left out).
	Items []string `json:"items,omitempty"`
}

// Main plays the outsider when Env is set, and exits; a test binary's
// TestMain calls it first.
func Main() {
	mode := os.Getenv(Env)
	if mode == "" {
		return
	}
	var r Result
	switch mode {
	case "attack":
		r = attackFrom(os.Getenv("OUTSIDER_NODE"), os.Getenv("OUTSIDER_CWD"))
	case "member":
		r = memberFrom(os.Getenv("OUTSIDER_NODE"), os.Getenv("OUTSIDER_TLS"), os.Getenv("OUTSIDER_SESSION"), os.Getenv("OUTSIDER_OWNER"), os.Getenv("OUTSIDER_CWD"))
	case "steal":
		r = steal(os.Getenv("OUTSIDER_LISTEN"), os.Getenv("OUTSIDER_HEALTH"), os.Getenv("OUTSIDER_CERT"), os.Getenv("OUTSIDER_KEY"))
	default:
		r.Err = "unknown mode " + mode
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	os.Exit(0)
}

func attackFrom(node, cwd string) Result {
	o, err := NewOutsider("127.0.0.1:0", "")
	if err != nil {
		return Result{Err: err.Error()}
	}
	defer o.Close()
	err = o.Attack(node, cwd, 5*time.Second, 2*time.Minute)
	text, ids := o.Written()
	r := Result{Text: text, Answered: ids, Items: o.Items()}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func memberFrom(node, tlsDir, sid, owner, cwd string) Result {
	o, err := NewOutsider("127.0.0.1:0", tlsDir)
	if err != nil {
		return Result{Err: err.Error()}
	}
	defer o.Close()
	err = o.Member(node, sid, owner, cwd, 5*time.Second, time.Minute)
	text, ids := o.Written()
	r := Result{Text: text, Answered: ids, Items: o.Items()}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func steal(listen, health, certFile, keyFile string) Result {
	o, err := NewOutsider(listen, "")
	if err != nil {
		return Result{Err: err.Error()}
	}
	defer o.Close()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return Result{Err: err.Error()}
	}
	stop, err := o.ServeHealth(health, "test", &cert)
	if err != nil {
		return Result{Err: err.Error()}
	}
	defer stop()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	text, ids := o.Written()
	return Result{Text: text, Answered: ids}
}

// Attack is what the outsider of issue 28 did through a cluster's port:
// ask the node at address for a fresh session's grain, make the session
// as a client's node would (any owner, any folder), and run bash in it,
// each call bounded by call; it waits at most wait for the answers.
func (o *Outsider) Attack(address, cwd string, call, wait time.Duration) error {
	sid := fmt.Sprintf("20261203-000000-%08x", time.Now().UnixNano()&0xffffffff)
	grain, err := o.Activate(address, sid, call)
	if err != nil {
		return fmt.Errorf("activation: %w", err)
	}
	if err := o.Call(grain, 1, "mallory", "session/new", "1", sid, func(c *grainspb.Call) {
		c.Params = []byte(fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, cwd))
	}, call); err != nil {
		return fmt.Errorf("session/new: %w", err)
	}
	// As a client's node, which asks nothing of a session before its
	// client has the answer that named it.
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, ids := o.Written(); len(ids) > 0 {
			break
		}
	}
	if err := o.Call(grain, 2, "mallory", "session/prompt", "2", sid, func(c *grainspb.Call) {
		c.Params = promptParams(sid, "bash")
	}, call); err != nil {
		return fmt.Errorf("session/prompt: %w", err)
	}
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, ids := o.Written(); len(ids) == 2 {
			return nil
		}
	}
	return errors.New("the prompt was not answered")
}

// Member is what a tenant's command that read the cluster's key did
// (issue 42), as a member that holds no token: on the node at address, it
// asks the grain of owner's session sid to load it (in cwd) as owner,
// without a proof, then with a wrong one, then opens a session of its own in cwd as an owner no token has ("mallory")
// and prompts it "touch". Each call is bounded by call; a call taken is
// waited for, at most wait, until it is answered. It returns what each
// step met.
func (o *Outsider) Member(address, sid, owner, cwd string, call, wait time.Duration) error {
	var errs []error
	step := func(what string, grain *actor.PID, seq uint64, owner, method, id, sid string, params func(*grainspb.Call)) bool {
		if err := o.Call(grain, seq, owner, method, id, sid, params, call); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return false
		}
		for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, ids := o.Written(); slices.Contains(ids, id) {
				return true
			}
		}
		errs = append(errs, fmt.Errorf("%s: taken, and not answered in %v", what, wait))
		return false
	}
	grain, err := o.Activate(address, sid, call)
	if err != nil {
		return fmt.Errorf("activation: %w", err)
	}
	open := func(c *grainspb.Call) {
		c.Params = []byte(fmt.Sprintf(`{"sessionId":%q,"cwd":%q,"mcpServers":[]}`, sid, cwd))
	}
	step("session/load as "+owner, grain, 1, owner, "session/load", "1", sid, open)
	step("session/load as "+owner+" with a wrong proof", grain, 4, owner, "session/load", "4", sid, func(c *grainspb.Call) {
		open(c)
		c.Proof = make([]byte, 32)
		_, _ = rand.Read(c.Proof)
	})
	mine := fmt.Sprintf("20261203-000001-%08x", time.Now().UnixNano()&0xffffffff)
	if grain, err = o.Activate(address, mine, call); err != nil {
		return errors.Join(append(errs, fmt.Errorf("activation: %w", err))...)
	}
	if step("session/new as mallory", grain, 2, "mallory", "session/new", "2", mine, func(c *grainspb.Call) {
		c.Params = []byte(fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, cwd))
	}) {
		step("session/prompt as mallory", grain, 3, "mallory", "session/prompt", "3", mine, func(c *grainspb.Call) {
			c.Params = promptParams(mine, "touch")
		})
	}
	return errors.Join(errs...)
}

// promptParams is a session/prompt's params of one text block, as an edge
// puts them in a Call.
func promptParams(sid, text string) []byte {
	return []byte(fmt.Sprintf(`{"sessionId":%q,"prompt":[{"type":"text","text":%q}]}`, sid, text))
}
