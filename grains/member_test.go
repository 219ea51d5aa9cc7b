package grains

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/logs"
)

func TestMain(m *testing.M) {
	// protoactor's throttles start a timer goroutine at their first use
	// that lives for their period (up to a minute) and ends by itself; the
	// names are those of the closures as compiled, inlined or not.
	var ignore []goleak.Option
	for _, f := range []string{
		"actor.NewThrottle.func1.1",
		"actor.NewThrottleWithLogger.func1.1",
		"actor.NewDeadLetter.NewThrottle.func4.1",
		"cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1",
		"cluster.NewGossipActor.NewThrottleWithLogger.func2.1",
	} {
		ignore = append(ignore, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/"+f))
	}
	// The test members' mutual TLS: one set of `mm cluster-certs`' files.
	dir, err := os.MkdirTemp("", "grains-certs-")
	if err != nil {
		panic(err)
	}
	if err := clustertls.Generate(dir, time.Hour); err != nil {
		panic(err)
	}
	testTLS = configs.ClusterTLS{Cert: filepath.Join(dir, clustertls.CertFile), Key: filepath.Join(dir, clustertls.KeyFile), CA: filepath.Join(dir, clustertls.CAFile)}
	goleak.VerifyTestMain(m, append(ignore, goleak.Cleanup(func(int) { _ = os.RemoveAll(dir) }))...)
}

// testTLS is cluster.tls of the test members.
var testTLS configs.ClusterTLS

// freePorts returns n ports free on 127.0.0.1 a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// syncBuffer is a log that tests read while members write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echoKind answers a StringValue with the address of the node it runs on.
func echoKind() *cluster.Kind {
	return cluster.NewKind("echo", actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*wrapperspb.StringValue); ok {
			ctx.Respond(wrapperspb.String(ctx.ActorSystem().Address() + " " + m.Value))
		}
	}))
}

// config is a cluster block for a member on loopback, its health
// endpoint on health, polling peers.
func config(health int, peers ...string) configs.Cluster {
	return configs.Cluster{Name: "test", Provider: "automanaged", Advertise: "127.0.0.1:0",
		Peers: peers, HealthPort: health, FailureTimeout: 2 * time.Second, TLS: testTLS}
}

// TestMember: one member joins itself, hosts grains and counts them, tells
// a topology handler what it sees, and leaves.
func TestMember(t *testing.T) {
	health := freePorts(t, 1)[0]
	reg := prometheus.NewRegistry()
	var out syncBuffer
	m, err := Start(Options{
		Config:   config(health, fmt.Sprintf("localhost:%d", health)), // itself, by name: not polled twice
		Kinds:    []*cluster.Kind{echoKind()},
		Log:      logs.New(&out, slog.LevelInfo),
		Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(context.Background())
	waitFor(t, "joined", m.Joined)
	if got := m.Members(); !slices.Equal(got, []string{m.Address()}) {
		t.Errorf("members = %v, want only %s", got, m.Address())
	}
	lives := make(chan []string, 4)
	m.OnTopology(func(live, left []string) {
		if len(left) > 0 {
			t.Errorf("left = %v", left)
		}
		lives <- live
	})
	if live := <-lives; !slices.Equal(live, []string{m.Address()}) {
		t.Errorf("first OnTopology call: %v", live)
	}

	for i := range 5 {
		if _, err := m.Cluster().Request(fmt.Sprintf("id-%d", i), "echo", wrapperspb.String("hi"), cluster.WithTimeout(testwait.Hang)); err != nil {
			t.Fatal(err)
		}
	}
	if n := gauge(t, reg, "mm_cluster_grains"); n != 5 {
		t.Errorf("mm_cluster_grains = %v after 5 activations", n)
	}
	// A grain that stops, whatever stops it, is counted out.
	pid := m.Cluster().Get("id-0", "echo")
	if err := m.System().Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "4 grains", func() bool { return gauge(t, reg, "mm_cluster_grains") == 4 })
	if n := gauge(t, reg, "mm_cluster_members"); n != 1 {
		t.Errorf("mm_cluster_members = %v", n)
	}
	m.CrossNodeRequest(3*time.Millisecond, nil)
	m.CrossNodeRequest(time.Second, errors.New("lost"))
	if ok, failed := counter(t, reg, "mm_cluster_requests_total", "ok"), counter(t, reg, "mm_cluster_requests_total", "error"); ok != 1 || failed != 1 {
		t.Errorf("requests ok %v, error %v", ok, failed)
	}

	m.Leave(context.Background())
	if m.Joined() {
		t.Error("joined after Leave")
	}
	done := make(chan struct{})
	go func() { m.Leave(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(testwait.Hang):
		t.Error("a second Leave waits")
	}
	if strings.Contains(out.String(), "ERROR") || strings.Contains(out.String(), "WARN") {
		t.Errorf("a lone member's life logged trouble:\n%s", out.String())
	}
}

// TestTwoMembers: two members on loopback join each other, place grains
// on both, count them, tell a topology handler when one leaves, and go
// without leaving a goroutine behind.
func TestTwoMembers(t *testing.T) {
	testwait.Short(t, "a two-member cluster")
	if raceBuild {
		// Two members in one process race inside protoactor: each remote's
		// Start sets grpc's global logger while the other's server reads
		// it, and a remote's shutdown races its endpoint manager. mm runs
		// one member per process; cmd/mm's cluster tests run three.
		t.Skip("protoactor's remote races with a second member in the same process")
	}
	health := freePorts(t, 2)
	peers := []string{fmt.Sprintf("127.0.0.1:%d", health[0]), fmt.Sprintf("localhost:%d", health[1])}
	var out syncBuffer
	log := logs.New(&out, slog.LevelInfo)
	var members []*Member
	var regs []*prometheus.Registry
	for i := range 2 {
		reg := prometheus.NewRegistry()
		m, err := Start(Options{
			Config:   config(health[i], peers...),
			Kinds:    []*cluster.Kind{echoKind()},
			Log:      log.With("node", i),
			Registry: reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		regs = append(regs, reg)
	}
	defer func() {
		for _, m := range members {
			m.Leave(context.Background())
		}
	}()
	waitFor(t, "both members see both", func() bool {
		return members[0].Joined() && members[1].Joined() && len(members[0].Members()) == 2 && len(members[1].Members()) == 2
	})
	want := []string{members[0].Address(), members[1].Address()}
	slices.Sort(want)
	if got := members[1].Members(); !slices.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	if n := gauge(t, regs[0], "mm_cluster_members"); n != 2 {
		t.Errorf("mm_cluster_members = %v", n)
	}

	type change struct{ live, left []string }
	changes := make(chan change, 16)
	members[0].OnTopology(func(live, left []string) { changes <- change{live, left} })
	if c := <-changes; !slices.Equal(c.live, want) || len(c.left) != 0 {
		t.Errorf("first call = %+v, want the members and no left", c)
	}

	// Grains land on both nodes; each node counts its own.
	where := map[string]int{}
	for i := range 20 {
		r, err := members[0].Cluster().Request(fmt.Sprintf("id-%d", i), "echo", wrapperspb.String("hi"), cluster.WithTimeout(testwait.Hang))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		addr, _, _ := strings.Cut(r.(*wrapperspb.StringValue).Value, " ")
		where[addr]++
	}
	if len(where) != 2 {
		t.Errorf("20 grains placed on %v: want both nodes", where)
	}
	grains := gauge(t, regs[0], "mm_cluster_grains") + gauge(t, regs[1], "mm_cluster_grains")
	if grains != 20 || gauge(t, regs[0], "mm_cluster_grains") != float64(where[members[0].Address()]) {
		t.Errorf("grains counted %v and %v, placed %v", gauge(t, regs[0], "mm_cluster_grains"), gauge(t, regs[1], "mm_cluster_grains"), where)
	}

	start := time.Now()
	members[1].Leave(context.Background())
	t.Logf("leave took %v", time.Since(start))
	select {
	case c := <-changes:
		if !slices.Equal(c.live, []string{members[0].Address()}) || !slices.Equal(c.left, []string{members[1].Address()}) {
			t.Errorf("after a leave: %+v", c)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("no topology change after a member left")
	}
	if members[1].Joined() {
		t.Error("a member that left says it is joined")
	}
	if strings.Contains(out.String(), "ERROR") {
		t.Errorf("a join and a leave logged errors:\n%s", out.String())
	}
}

// TestStartFails: a port taken fails Start with an error that names it,
// and leaves nothing running; so does a config without cluster.tls.
func TestStartFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	health := freePorts(t, 1)[0]

	cfg := config(port, fmt.Sprintf("127.0.0.1:%d", port))
	if _, err := Start(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "cluster.healthPort") {
		t.Errorf("health port taken: %v", err)
	}
	// Without cluster.tls, on loopback too.
	cfg = config(health, fmt.Sprintf("127.0.0.1:%d", health))
	cfg.TLS = configs.ClusterTLS{}
	if _, err := Start(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "cluster.tls: is needed") {
		t.Errorf("no cluster.tls: %v", err)
	}
	cfg = config(health, fmt.Sprintf("127.0.0.1:%d", health))
	cfg.Advertise = taken.Addr().String()
	if _, err := Start(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("remote port taken: %v", err)
	}
	// The health port is free again.
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", health))
	if err != nil {
		t.Errorf("the health port of a failed Start: %v", err)
	} else {
		ln.Close()
	}
}

// gauge returns the value of the first gauge of the family name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// counter returns the value of the counter name{outcome=label}.
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// waitFor polls ok until it holds, testwait.Hang at most.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not %s", testwait.Hang, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
