// Package cli is the command line of mm and of mm-node: flags, config
// loading and wiring. A bash-first coding agent that editors drive over the
// Agent Client Protocol on stdin/stdout (mm -acp), or, with `mm serve`, over
// the network; `mm connect` bridges an editor's stdin/stdout to a served mm.
//
// The two binaries differ only in what Run is given: mm, the one editors
// start, links no cluster (cmd/mm passes no NewNode) and hands a serve whose
// config names a cluster to mm-node, which is mm plus the cluster
// (cmd/mm-node passes grains.NewNode).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/logs"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools/skills"
)

// Run runs the command line args (without the program's name) and returns
// the exit code. newNode makes a cluster node for mm serve; nil, mm serve
// with cluster.name set runs mm-node instead (handOff).
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, newNode NewNode) int {
	if newNode != nil {
		os.Unsetenv(handOffEnv) // this is mm-node: the hand-off is over
	}
	if len(args) > 0 {
		switch args[0] {
		case "serve":
			return runServe(args[1:], stderr, newNode)
		case "connect":
			return runConnect(args[1:], stdin, stdout, stderr)
		case "cluster-certs":
			return runClusterCerts(args[1:], stderr)
		}
	}
	fs := flag.NewFlagSet("mm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveACP := fs.Bool("acp", false, "serve the Agent Client Protocol on stdin/stdout")
	showVersion := fs.Bool("version", false, "print the version and exit")
	configPath := fs.String("config", "", "config file (default $MM_CONFIG, then ~/.config/mm/config.yaml)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file until exit (for performance work)")
	askAgent := fs.String("ask", "", "`AGENT_CMD`: ask the ACP agent this shell command starts the question given after it, print its answer")
	allow := fs.Bool("allow", false, "with --ask: allow the asked agent's permission requests (refused otherwise)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mm -acp [-config FILE] | mm serve [-listen ADDR] [-config FILE] | mm connect [-config FILE] URL | mm --ask AGENT_CMD [--allow] \"question\" | mm cluster-certs [-days N] DIR | mm --version\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: not a failure
		}
		return 2
	}
	// Only --ask takes words after its flags. Anything else left over is a
	// mistake to say, not to ignore: `mm -acp serve` (an image's default
	// argument before the caller's) would otherwise speak ACP on stdio as
	// if nothing were wrong.
	if *askAgent == "" && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mm: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, protocol.Version)
		return 0
	}
	if *askAgent != "" {
		// --allow may come after the question too.
		var words []string
		for _, a := range fs.Args() {
			if a == "--allow" || a == "-allow" {
				*allow = true
				continue
			}
			words = append(words, a)
		}
		if len(words) == 0 {
			fs.Usage()
			return 2
		}
		log := logs.New(stderr, slog.LevelInfo)
		cfg, err := configs.Load(*configPath)
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		stopReaper, err := procs.BecomeSubreaper(log)
		if err == nil {
			defer func() { stopReaper(); procs.KillDescendants() }()
		}
		return ask(*askAgent, strings.Join(words, " "), *allow, cfg, stdout, log)
	}
	if !*serveACP {
		fs.Usage()
		return 2
	}
	errw := logs.NewBatchWriter(stderr)
	defer errw.Close()
	log := logs.New(errw, slog.LevelInfo)
	stopProfile, err := startProfile(*cpuProfile)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	defer stopProfile()
	cfg, err := configs.Load(*configPath)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	model, models, err := loadModels(cfg)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	banner(log, cfg)

	setGC()
	defer guardProcess(log)()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	mode := sandbox.Mode(cfg.Sandbox.Mode) // unconfined unless the config says
	sb, err := sandboxFor(log, mode, cfg.Sandbox, false)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	conn, err := app.Start(app.Options{
		Config: cfg, Model: model, Models: models, In: stdin, Out: stdout, Log: log,
		ContextWindow: cfg.Model.ContextWindow, Probe: probe(cfg), StateDir: store.StateDir(),
		Sandbox: sb, SandboxMode: mode,
	})
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	conn.Wait(ctx)
	return 0
}

// loadModels builds the main model and the other models sessions may
// select.
func loadModels(cfg *configs.Config) (llm.Model, []actors.NamedModel, error) {
	model, err := llm.New(modelConfig(cfg.Model))
	if err != nil {
		return nil, nil, err
	}
	var models []actors.NamedModel
	for _, m := range cfg.Models {
		lm, err := llm.New(modelConfig(m.Model))
		if err != nil {
			return nil, nil, fmt.Errorf("models %s: %v", m.ID, err)
		}
		name := m.Name
		if name == "" {
			name = m.ID
		}
		models = append(models, actors.NamedModel{ID: m.ID, Name: name, Model: lm, ContextWindow: m.ContextWindow, Vision: m.Vision})
	}
	return model, models, nil
}

// probe asks the model server for its context window while the config
// does not give it.
func probe(cfg *configs.Config) actors.Probe {
	if cfg.Model.ContextWindow != 0 {
		return nil
	}
	return func(ctx context.Context) int { return llm.ProbeContextWindow(ctx, modelConfig(cfg.Model)) }
}

func modelConfig(m configs.Model) llm.Config {
	return llm.Config{
		Provider:    m.Provider,
		BaseURL:     m.ResolvedBaseURL(),
		Name:        m.Name,
		APIKey:      m.APIKey(),
		Temperature: m.Temperature,
		MaxTokens:   m.MaxTokens,
		Script:      m.Script,
		IdleTimeout: m.IdleTimeout,
		Retries:     m.Retries,
	}
}

// banner tells the user on stderr what this process is about to serve.
func banner(log *slog.Logger, cfg *configs.Config) {
	path := cfg.Path
	if path == "" {
		path = "(embedded defaults)"
	}
	model := cfg.Model.Provider
	if cfg.Model.Provider != "scripted" {
		url, from := cfg.Model.BaseURLSource()
		model += " " + cfg.Model.Name + " at " + url + " (from " + from + ")"
	}
	log.Info(fmt.Sprintf("mm %s · model %s · config %s · yolo=%t", protocol.Version, model, path, cfg.Yolo))
	// Skills are read per session (their cwd matters); the banner reads
	// them for the directory mm starts in, which is the project's when an
	// editor starts it, to say what a session there will have.
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	set := skills.Load(skills.Dirs(cfg.Skills.Dirs, cwd, home))
	log.Info(fmt.Sprintf("%d skill(s) · %d hook(s)", len(set.Skills), len(cfg.Hooks.PreToolCall)+len(cfg.Hooks.PostAsk)))
	for _, w := range set.Warnings {
		log.Warn(w)
	}
	if f := cfg.Prompt.SystemFile; f != "" {
		// Read again by each session as it opens; a file missing now is
		// most likely a typo, said before the first session finds out.
		if _, err := os.Stat(f); err != nil {
			log.Warn(fmt.Sprintf("prompt.systemFile: %v; sessions use mm's prompt alone until it exists", err))
		} else {
			log.Info(fmt.Sprintf("system prompt: %s (%s)", f, cfg.Prompt.SystemMode))
		}
	}
}

// sandboxFor finds how this machine confines commands when mode asks for
// it (nil for sandbox.Off: mm -acp's default, which runs nothing to find
// out), and says in the banner which policy is in force and how. A server
// (shared: mm serve) does not start where its tenants' commands would hold
// what mm holds: unconfined, as root, or with the network on and no
// network of their own (they would reach mm's ports and the store on this
// machine's loopback). Once confining, mm's own process is made
// unreadable to them (not dumpable: /proc/<mm>/environ and its memory are
// root's).
func sandboxFor(log *slog.Logger, mode sandbox.Mode, c configs.Sandbox, shared bool) (*sandbox.Sandbox, error) {
	if mode == sandbox.Off {
		return nil, nil
	}
	sb, err := sandbox.DetectWith(c.With)
	if err != nil {
		return nil, fmt.Errorf("sandbox.with is %s, and it cannot confine commands here: %v (docs/sandbox.md)", c.With, err)
	}
	p := sandbox.Policy{Mode: mode, Network: c.Network}
	var user *sandbox.Ident
	if os.Geteuid() == 0 {
		if user, err = sandbox.LookupUser(c.User); err != nil {
			return nil, fmt.Errorf("sandbox.user: mm runs as root, and the commands it confines must run as another user: %v (docs/sandbox.md)", err)
		}
	}
	as := ""
	if user != nil {
		as = ", as " + user.String()
	}
	switch sb.Kind() {
	case sandbox.Unconfined:
		if shared {
			return nil, fmt.Errorf("sandbox: %s, and commands cannot be confined here: %s; a tenant's command would hold what mm holds (docs/sandbox.md)", p, sb.Why())
		}
		log.Warn(fmt.Sprintf("sandbox: %s asked for, but commands run unconfined: %s (docs/sandbox.md)", p, sb.Why()))
		return sb, nil
	case sandbox.Landlock:
		why := ""
		if sb.Why() != "" {
			why = ": " + sb.Why()
		}
		log.Warn(fmt.Sprintf("sandbox: %s, with landlock (ABI %d)%s: a path inside a session's folders cannot be hidden, nor .env-like files kept read-only there%s (docs/sandbox.md)", p, sb.ABI(), as, why))
	default:
		log.Info(fmt.Sprintf("sandbox: %s, with %s%s", p, sb.Kind(), as))
	}
	if shared {
		if err := sb.CheckNetwork(user, c.Network); err != nil && c.Network {
			return nil, fmt.Errorf("sandbox.network is on, and %v; without it a tenant's command would reach this machine's loopback (mm's ports, the cluster's, the store): mend that, or set sandbox.network: false (docs/sandbox.md)", err)
		} else if err != nil {
			return nil, fmt.Errorf("sandbox.network is off, and commands cannot be kept off the network here: %v (docs/sandbox.md)", err)
		}
	}
	sandbox.Protect()
	return sb, nil
}

// setGC sets the collector's target for a serving mm, unless GOGC does:
// mm's live heap is small (a few KB a session); twice the default headroom
// costs a few MB and saves about 7% of the CPU under load (mmstress -procs
// 1), over pipes and over the network alike.
func setGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}

// startProfile writes a CPU profile to path ("": none) until stop.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// guardProcess readies a serving mm (mm -acp, mm serve) and returns what
// to run at its exit. A client that goes away mid-write must not kill mm
// with SIGPIPE: the write fails, and the shutdown path runs. What commands
// leave running (background jobs, setsid children) is re-parented to mm
// rather than to init, and killed at the exit.
func guardProcess(log *slog.Logger) (atExit func()) {
	signal.Ignore(syscall.SIGPIPE)
	stopReaper, err := procs.BecomeSubreaper(log)
	if err != nil {
		log.Warn(fmt.Sprintf("cannot become the subreaper of commands' orphans: %v", err))
	}
	return func() {
		stopReaper()
		if n := procs.KillDescendants(); n > 0 {
			log.Info(fmt.Sprintf("exit: killed %d process(es) that commands left running", n))
		}
	}
}
