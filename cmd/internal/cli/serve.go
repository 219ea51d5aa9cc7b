package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/logs"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/serve"
	"github.com/mm-agent/mm/store"
)

// runServe is `mm serve [-listen ADDR] [-config FILE]`: ACP over the
// network until SIGTERM or SIGINT, then a drain. It writes nothing on
// stdout; its log, the token it made (if it made one) and the line naming
// its address go to stderr.
func runServe(args []string, stderr io.Writer, newNode NewNode) (code int) {
	// A node the cluster counted out starts again once everything below
	// is over, its log flushed: the last deferred call runs first here.
	keepName()
	var again atomic.Bool
	defer func() {
		if again.Load() && code == 0 {
			code = startAgain(stderr)
		}
	}()
	fs := flag.NewFlagSet("mm serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "`ADDR` to listen on, host:port; port 0 picks a free one (default serve.listen)")
	configPath := fs.String("config", "", "config file (default $MM_CONFIG, then ~/.config/mm/config.yaml)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file until exit (for performance work)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mm serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	errw := logs.NewBatchWriter(stderr)
	defer errw.Close()
	log := logs.New(errw, slog.LevelInfo)
	cfg, err := configs.Load(*configPath)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	if cfg.Cluster.Enabled() && newNode == nil {
		errw.Close()
		return handOff(args, stderr)
	}
	model, models, err := loadModels(cfg)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	tokens, made, err := serveTokens(cfg.Serve.Tokens, os.Getenv("MM_SERVE_TOKEN"))
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	if made != "" && cfg.Cluster.Enabled() {
		// A node proves its clients' owners to the others with their
		// tokens: a token of this run alone would prove nothing to them.
		log.Error("cluster.name is set, and no token is configured: the nodes of a cluster share serve.tokens (or MM_SERVE_TOKEN), with which each proves its clients' owners to the others; configure the same tokens on every node (docs/cluster.md)")
		return 1
	}
	addr := cfg.Serve.Listen
	if *listen != "" {
		addr = *listen
	}
	banner(log, cfg)
	cwd, _ := os.Getwd()
	roots := cfg.Serve.ServeRoots(cwd)
	log.Info("serve: roots " + strings.Join(roots, ", "))
	// A shared server confines its tenants' commands unless its config
	// says otherwise: workspace-write when sandbox.mode is empty.
	mode := sandbox.Mode(cfg.Sandbox.Mode)
	if mode == sandbox.Off {
		mode = sandbox.WorkspaceWrite
	}
	sb, err := sandboxFor(log, mode, cfg.Sandbox, true)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	// One hub for every connection: one turn serializer, one table of
	// sessions, each owned by the token that made it; its figures on
	// /metrics beside the transport's.
	reg := serve.NewRegistry()
	var hub *protocol.Hub
	metrics := serve.NewRuntimeMetrics(reg, func() int { return hub.Sessions() })
	// A cluster node's sessions run in its member's actor system: a
	// session's actor is its grain.
	var node Node
	var sys *actor.ActorSystem
	if cfg.Cluster.Enabled() {
		node = newNode(log)
		sys = node.System()
	}
	hub, err = app.NewHub(app.Options{
		Config: cfg, Model: model, Models: models, Log: log, Metrics: metrics,
		ContextWindow: cfg.Model.ContextWindow, Probe: probe(cfg), StateDir: store.StateDir(), System: sys,
		Sandbox: sb, SandboxMode: mode, Shared: true,
		Limits: protocol.Limits{SessionsPerToken: cfg.Serve.MaxSessionsPerToken, MCPPerToken: cfg.Serve.MaxMCPProcessesPerToken, DetachedIdle: cfg.Serve.DetachedIdle},
	})
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	// Every session is stopped and saved once the connections are over.
	defer hub.Shutdown()
	if err := checkFolders(log, cfg, roots, hub.Store()); err != nil {
		log.Error(err.Error())
		return 1
	}
	// A cluster node takes connections once it is a member: until then
	// /readyz and /acp answer 503. Its connections' sessions are grains,
	// wherever the cluster places them.
	connector := hubConnector{hub: hub, roots: roots}
	// A server whose store cannot be reached answers no turn it could not
	// keep (a turn is answered once saved), and says it is not ready, so
	// that a balancer sends new clients to a node that can.
	health := store.WatchHealth(hub.Store(), time.Second, func(err error) {
		if err != nil {
			log.Error(fmt.Sprintf("serve: the session store cannot be reached: %v; /readyz answers 503 until it is back", err))
			return
		}
		log.Info("serve: the session store is reachable again")
	})
	defer health.Stop()
	ready := health.OK
	var peers serve.Peers
	if node != nil {
		connector.forward = node.Forward
		ready = func() bool { return node.Ready() && health.OK() }
		peers = node
	}
	srv, err := serve.New(serve.Options{
		Connector: connector,
		Registry:  reg,
		Tokens:    tokens, AllowedOrigins: cfg.Serve.AllowedOrigins,
		MaxConnections: cfg.Serve.MaxConnections, MaxMessageBytes: int(cfg.Serve.MaxMessageBytes),
		MaxIncomingBytes: int(cfg.Serve.MaxIncomingBytes), MessageTimeout: cfg.Serve.MessageTimeout,
		StallTimeout: cfg.Serve.StallTimeout, DrainTimeout: cfg.Serve.DrainTimeout,
		ResumeTimeout: cfg.Serve.ResumeTimeout, ResumeWindowBytes: int(cfg.Serve.ResumeWindowBytes),
		CertFile: cfg.Serve.TLS.Cert, KeyFile: cfg.Serve.TLS.Key,
		Log: log, Ready: ready, Peers: peers,
	})
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error(fmt.Sprintf("serve.listen: %v", err))
		return 1
	}
	if made != "" {
		fmt.Fprintf(errw, "mm serve: no token is configured (serve.tokens, MM_SERVE_TOKEN); this run's token is %s\n", made)
	}
	scheme := "http"
	if srv.TLS() {
		scheme = "https"
	}
	fmt.Fprintf(errw, "mm serve: listening on %s://%s/acp\n", scheme, ln.Addr())

	stopProfile, err := startProfile(*cpuProfile)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	defer stopProfile()
	setGC()
	defer guardProcess(log)()
	base, rejoin := context.WithCancel(context.Background())
	defer rejoin()
	ctx, stop := signal.NotifyContext(base, syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		// A second signal ends the process at once, drain or not.
		stop()
	}()
	// The server answers (503 on /readyz) while the member joins, which
	// takes protoactor a second or more.
	serveCtx, cancelServe := context.WithCancel(ctx)
	defer cancelServe()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx, ln) }()
	drained := make(chan struct{})
	if node != nil {
		owners := make(map[string]string, len(tokens))
		for _, t := range tokens {
			owners[t.Name] = t.Secret
		}
		if err := node.Join(hub, roots, owners, cfg, reg); err != nil {
			log.Error(err.Error())
			cancelServe()
			<-served
			return 1
		}
		node.Advertise(ln.Addr().(*net.TCPAddr).Port, srv.CertDER())
		// Counted out for good (a partition healed, a freeze ended), the
		// node cannot be a member again under its id: it stops as on
		// SIGTERM, then starts again, a new member.
		go func() {
			select {
			case <-node.Rejoin():
				again.Store(true)
				rejoin()
			case <-ctx.Done():
			}
		}()
		// On SIGTERM the turns of other nodes' clients running here drain
		// as this node's own connections do.
		go func() {
			defer close(drained)
			<-ctx.Done()
			dctx, cancel := context.WithTimeout(context.Background(), cfg.Serve.DrainTimeout)
			defer cancel()
			node.Drain(dctx)
		}()
	} else {
		close(drained)
	}
	err = <-served
	if ctx.Err() != nil {
		<-drained
	}
	// The connections are over: every session stops, its turn cancelled,
	// its file saved, before what commands left running is killed; then
	// the node leaves its cluster. The store is no longer watched: its
	// connections close with the hub.
	health.Stop()
	hub.Shutdown()
	if node != nil {
		node.Leave(leaveTimeout)
	}
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	if again.Load() {
		log.Info("serve: stopped; starting again to rejoin the cluster")
		return 0
	}
	log.Info("serve: stopped")
	return 0
}

// startAgain runs this program again in place (exec: the same pid,
// arguments, environment and standard files), as a node the cluster
// counted out must to be a member again. It returns only when that fails:
// a supervisor must then start it (exit status 75, EX_TEMPFAIL).
func startAgain(stderr io.Writer) int {
	err := syscall.Exec(selfPath(), os.Args, os.Environ())
	fmt.Fprintf(stderr, "mm serve: cannot start again to rejoin the cluster: %v; start it again\n", err)
	return 75
}

// selfPath is the file to exec to run this very program again. The kernel
// names a process (its comm, what ps and top show) after the file exec'd,
// so /proc/self/exe would rename mm-node "exe": the file's own path is
// exec'd while it is still this program's file. When it is not (the file
// was replaced, an upgrade, or removed), /proc/self/exe still is, and the
// program started again takes its name back (keepName).
func selfPath() string {
	const self = "/proc/self/exe"
	path, err := os.Executable()
	if err != nil {
		return self
	}
	want, err1 := os.Stat(self)
	got, err2 := os.Stat(path)
	if err1 != nil {
		return path // no /proc: the path is all there is
	}
	if err2 != nil || !os.SameFile(want, got) {
		return self
	}
	return path
}

// keepName gives back its name to a program exec'd through /proc/self/exe
// (selfPath), which the kernel named "exe": the name of argv[0], as a
// shell's exec gives it. Writing /proc/self/comm names the process (its
// first thread), whichever thread writes.
func keepName() {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil || strings.TrimSpace(string(b)) != "exe" || len(os.Args) == 0 {
		return
	}
	name := filepath.Base(os.Args[0])
	if name == "exe" || name == "." || name == "/" {
		return
	}
	if len(name) > 15 { // TASK_COMM_LEN less its NUL: the kernel cuts it so
		name = name[:15]
	}
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// leaveTimeout bounds a node's graceful leave once its connections are
// over: protoactor waits 2 s for ownership to move, then up to 10 s for
// its remote to stop; past this the process exits anyway, and the others
// see it gone within cluster.failureTimeout.
const leaveTimeout = 15 * time.Second

// serveTokens returns the tokens let in: serve.tokens, plus MM_SERVE_TOKEN
// named default. With neither, it makes one (named default) and returns
// its secret as made, to be shown once.
func serveTokens(configured []configs.ServeToken, env string) (tokens []serve.Token, made string, err error) {
	for _, t := range configured {
		if env != "" && t.Name == "default" {
			return nil, "", errors.New("MM_SERVE_TOKEN is the token named default, which serve.tokens names too")
		}
		tokens = append(tokens, serve.Token{Name: t.Name, Secret: t.Token})
	}
	if env != "" {
		if len(env) < 16 {
			return nil, "", errors.New("MM_SERVE_TOKEN: must be at least 16 characters")
		}
		tokens = append(tokens, serve.Token{Name: "default", Secret: env})
	}
	if len(tokens) == 0 {
		made = serve.NewSecret()
		tokens = []serve.Token{{Name: "default", Secret: made}}
	}
	return tokens, made, nil
}

// hubConnector opens each served connection on the server's hub, as its
// token's.
type hubConnector struct {
	hub   *protocol.Hub
	roots []string
	// forward, in a cluster, sends a connection's sessions to their grains.
	forward func(owner string) protocol.NewForwarder
}

func (c hubConnector) Connect(_ context.Context, cl serve.Client, in jsonrpc.Source, out jsonrpc.Writer) (serve.Conn, error) {
	o := protocol.ConnOptions{Source: in, Writer: out, Owner: cl.Token, Roots: c.roots}
	if c.forward != nil {
		o.Forward = c.forward(cl.Token)
	}
	return c.hub.Connect(o), nil
}
