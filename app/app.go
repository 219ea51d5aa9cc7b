// Package app is mm's composition root: it builds one process's parts
// from its config — the sensitive-path matcher, the key that signs session
// files, the store (files or Postgres), the hooks, the actor runtime — and
// hands them to the protocol.Hub that serves ACP on them. Nothing else
// builds them: protocol only speaks ACP, actors only runs sessions, store
// only keeps them. The command line (cmd/internal/cli), mmstress's in-process
// target and the tests start mm through here.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Options are what a process is made of.
type Options struct {
	Config *configs.Config
	Model  llm.Model
	// Models are the other models sessions may select (config models).
	Models []actors.NamedModel
	Log    *slog.Logger
	// ContextWindow is the model's window, 0 if unknown.
	ContextWindow int
	// Probe asks the server for the window while it is unknown, at start
	// and at each session/new; nil never probes.
	Probe actors.Probe
	// Metrics is told of turns, tool calls, tokens and retries; nil: none.
	Metrics actors.Metrics
	// StateDir is the user's state directory (store.StateDir), where the
	// index of the folders holding saved sessions and the key that signs
	// session files are kept. "" keeps neither: session/list without a
	// cwd knows only a connection's folders, session files are written
	// unsigned, and no file is trusted to set a session's mode.
	StateDir string
	// DeferRuntime is protocol.HubOptions.DeferRuntime; Start sets it.
	DeferRuntime bool
	// Limits bound what a token holds on a shared hub (mm serve's).
	Limits protocol.Limits
	// Sandbox confines the sessions' commands with SandboxMode
	// (actors.Options); nil or sandbox.Off: unconfined.
	Sandbox     *sandbox.Sandbox
	SandboxMode sandbox.Mode
	// Shared is actors.Options.Shared: mm serve's.
	Shared bool
	// System is the actor system the runtime runs in
	// (actors.Options.System): a cluster node's; nil makes one.
	System *actor.ActorSystem

	// In and Out are Start's connection: the client's messages (stdin)
	// and mm's, JSON-RPC only (stdout). Source, when set, gives the
	// client's messages parsed, in place of In (protocol.ConnOptions).
	In     io.Reader
	Out    io.Writer
	Source jsonrpc.Source
	// Writer, when set, takes mm's messages, each with what a transport
	// needs to know of it (jsonrpc.Out); Out is not written.
	Writer jsonrpc.Writer
}

// NewHub builds the parts and the hub that shares them between
// connections (mm serve's). The runtime starts in the background. It
// fails on a configuration the runtime cannot use, and on a store.url
// whose database cannot be reached or its tables made.
func NewHub(o Options) (*protocol.Hub, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	warn := func(w string) { log.Warn("[acp] " + w) }
	sensitive, err := tools.NewSensitive(o.Config.Tools.Sensitive)
	if err != nil {
		return nil, fmt.Errorf("%w: tools.sensitive: %v", configs.ErrConfig, err)
	}
	var user *sandbox.Ident
	if o.Sandbox != nil && o.SandboxMode != sandbox.Off {
		if user, err = sandboxUser(o.Config); err != nil {
			return nil, err
		}
	}
	key := store.OpenKey(o.StateDir, warn)
	backend, err := openStore(o.Config, key, o.StateDir, log)
	if err != nil {
		return nil, err
	}
	cfg := o.Config
	return protocol.NewHub(protocol.HubOptions{
		Config: cfg, Log: log, Store: backend, DeferRuntime: o.DeferRuntime, Limits: o.Limits,
		Runtime: func(others func(string) ([]string, error)) *actors.Runtime {
			if cfg.Sessions.Enabled {
				// The key's file is read (or made) here rather than by
				// the first save, which a session actor waits for.
				key.Load()
			}
			return actors.NewRuntime(actors.Options{
				Config: cfg, Model: o.Model, Models: o.Models, Sensitive: sensitive,
				Hooks: &hooks.Runner{PreToolCallLines: cfg.Hooks.PreToolCall, PostAskLines: cfg.Hooks.PostAsk, Timeout: cfg.Hooks.Timeout, Log: log},
				Log:   log, ContextWindow: o.ContextWindow, Probe: o.Probe, Key: key, Metrics: o.Metrics, Store: backend,
				System:  o.System,
				Sandbox: o.Sandbox, SandboxMode: o.SandboxMode, SandboxUser: user, Shared: o.Shared, Hidden: hiddenPaths(cfg, o.StateDir), OthersFolders: others,
			})
		},
	}), nil
}

// Start begins serving mm -acp's one connection, on In and Out, on a hub
// of its own, whose runtime starts once initialize is answered; the
// connection's Wait ends both. It fails as NewHub does.
func Start(o Options) (*protocol.Conn, error) {
	o.DeferRuntime = true
	h, err := NewHub(o)
	if err != nil {
		return nil, err
	}
	return h.Sole(protocol.ConnOptions{In: o.In, Source: o.Source, Out: o.Out, Writer: o.Writer, Log: o.Log}), nil
}

// openStore opens where the sessions are kept: the files under
// sessions.dir, signed and checked with key, their folders indexed in
// stateDir; or the Postgres database of store.url, connected and its
// schema made or migrated now, so that a database mm cannot use stops it
// at start rather than at the first save.
func openStore(cfg *configs.Config, key *store.Key, stateDir string, log *slog.Logger) (store.Backend, error) {
	if cfg.Store.URL == "" {
		return store.NewFileStore(cfg.Sessions.Dir,
			&store.Reader{Key: key, MaxBytes: int64(cfg.Sessions.MaxFileBytes), Warn: func(w string) { log.Warn("[acp] " + w) }},
			store.OpenFolders(stateDir), store.OpenOwners(stateDir)), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	pg, err := store.OpenPostgres(ctx, cfg.Store.URL, int64(cfg.Sessions.MaxFileBytes))
	if err != nil {
		return nil, err
	}
	log.Info(fmt.Sprintf("[acp] sessions are kept in postgres (store.url), ready in %v", time.Since(start).Round(time.Millisecond)))
	return pg, nil
}

// hiddenPaths are the paths no confined command sees: mm's state (the
// signing key, the folder index), its config file (serve.tokens), the
// user's mm config folder, ~/.ssh, the TLS files of mm serve and of the
// cluster (the node's key makes a member), the store's credentials
// (~/.pgpass, $PGPASSFILE) and the folder of its socket. A relative path
// is taken as mm takes it, from the folder it runs in.
func hiddenPaths(cfg *configs.Config, stateDir string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, abs)
		}
	}
	add(stateDir)
	add(cfg.Path)
	if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, ".ssh"))
		add(filepath.Join(home, ".config", "mm"))
		add(filepath.Join(home, ".pgpass"))
	}
	for _, f := range []string{cfg.Serve.TLS.Cert, cfg.Serve.TLS.Key, cfg.Cluster.TLS.Cert, cfg.Cluster.TLS.Key, cfg.Cluster.TLS.CA, os.Getenv("PGPASSFILE")} {
		add(f)
	}
	if cfg.Store.URL != "" {
		add(store.SocketDir(cfg.Store.URL))
	}
	// A container's secrets: Kubernetes mounts a pod's service-account
	// token under /var/run/secrets (with the k8s provider, one that may
	// patch the namespace's pods, their image included), as cloud
	// identities do theirs, and Docker its secrets under /run/secrets.
	add("/run/secrets")
	add("/var/run/secrets")
	return out
}

// sandboxUser is whom confined commands run as: sandbox.user when mm runs
// as root (never root itself), mm's own user otherwise (nil).
func sandboxUser(cfg *configs.Config) (*sandbox.Ident, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := sandbox.LookupUser(cfg.Sandbox.User)
	if err != nil {
		return nil, fmt.Errorf("%w: sandbox.user: mm runs as root, and its confined commands must run as another user: %v", configs.ErrConfig, err)
	}
	return u, nil
}
