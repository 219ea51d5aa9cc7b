// Package grainstest holds a peer for the tests of mm's cluster written to
// hurt it: an outsider that speaks protoactor's remote, and mm's own
// messages, to a node as any program that reaches the cluster's port
// could — no certificate of the cluster's CA, and no token.
package grainstest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"

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
}

// NewOutsider starts an outsider whose remote listens on listen
// (host:port; port 0 picks one), without TLS.
func NewOutsider(listen string) (*Outsider, error) {
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, err
	}
	o := &Outsider{sys: actor.NewActorSystem()}
	o.r = remote.NewRemote(o.sys, remote.Configure(host, port))
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

// Address is where the outsider's remote listens.
func (o *Outsider) Address() string { return o.sys.Address() }

func (o *Outsider) receive(ctx actor.Context) {
	m, ok := ctx.Message().(*grainspb.Out)
	if !ok {
		return
	}
	// It answers as a client's node would, so that the session goes on:
	// the bytes written given back, a marker reached.
	link := actor.NewPID(m.Link.GetAddress(), m.Link.GetId())
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
	case *grainspb.Out_Response:
		o.ids = append(o.ids, string(it.Response.Id))
	}
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
	if _, ok := res.(*grainspb.Accepted); !ok {
		return fmt.Errorf("the grain answered %T", res)
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
