package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mm-agent/mm/agents"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/internal/gopool"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/prompt"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
	"github.com/mm-agent/mm/tools/fetch"
)

// Options wires a Runtime.
type Options struct {
	Config *configs.Config
	// Model is the main model, "default"; Models are the others a session
	// may switch to.
	Model  llm.Model
	Models []NamedModel
	// Out and Client are where a session's output goes and whom its tools
	// ask, unless the session is spawned or attached with its own (a
	// server's connections each have theirs); nil: nowhere, and no one.
	Out Outbox
	// Client asks the client's user: permissions, forms (the ACP edge).
	Client Client
	// Hooks are the configured hooks; nil runs none.
	Hooks *hooks.Runner
	// Sensitive matches the paths that always ask (tools.sensitive).
	Sensitive *tools.Sensitive
	// Metrics is told of turns, tool calls, tokens and retries; nil: none.
	Metrics Metrics
	// Log receives every log line, protoactor's included; it must not write
	// to stdout, which carries JSON-RPC only.
	Log *slog.Logger
	// ContextWindow is the model's window in tokens, 0 if unknown. It may be
	// set later with SetContextWindow, or by Probe.
	ContextWindow int
	// Probe asks the server for the main model's window while it is
	// unknown: when the runtime starts and when a session is created. nil
	// never probes.
	Probe Probe
	// Key signs the session files the sessions write (store.Key); nil
	// writes them unsigned.
	Key *store.Key
	// Store keeps the sessions when sessions.enabled is set; nil: the
	// file store under sessions.dir, read with Key.
	Store store.Backend
	// System, when set, is the actor system the runtime runs in: a node
	// of mm's cluster gives its member's, whose session grains are the
	// sessions' actors (grain.go). The runtime then leaves its logging
	// and its shutdown to whoever made it. nil: the runtime makes its own.
	System *actor.ActorSystem
	// Sandbox confines the commands the sessions' tools start, with the
	// policy of SandboxMode (sandbox.Off: none) and the config's
	// sandbox.network; Hidden are the paths no confined command sees (mm's
	// state and config, ~/.ssh), besides each session's own store folder.
	// nil: commands run unconfined.
	Sandbox     *sandbox.Sandbox
	SandboxMode sandbox.Mode
	Hidden      []string
	// SandboxUser is whom confined commands run as (sandbox.user, when mm
	// runs as root); nil: mm's own user.
	SandboxUser *sandbox.Ident
	// Shared says that the sessions are the tenants' of a shared server
	// (mm serve): each session's confined commands, with the network on,
	// get a network of their own (sandbox.Network), which reaches the
	// outside and not this machine's loopback (mm's ports, the store); and
	// the hooks run confined like them, in the tenant's folder where the
	// tenant's files (git's config) would otherwise run as mm. false (mm
	// -acp, its user's own commands): the machine's network, hooks as they
	// are.
	Shared bool
	// OthersFolders lists the folders recorded as owned by another token
	// than owner (the store's, on mm serve: folders have owners): a
	// session's confined commands see them empty and its file tools
	// refuse them, live sessions in them or not; nil: none. It waits for
	// the store, and is called off the actors, when a command or a file
	// tool starts; an error stops the command or the tool.
	OthersFolders func(owner string) ([]string, error)
}

// NamedModel is a model a session can select by ID.
type NamedModel struct {
	ID, Name      string
	Model         llm.Model
	ContextWindow int
	Vision        bool // it takes images (model.vision)
}

// Runtime is one actor system serving one ACP connection: its sessions, its
// turn serializer and the shared, read-only dependencies they use.
type Runtime struct {
	sys *actor.ActorSystem
	// ownSystem is set when the runtime made sys, and shuts it down.
	ownSystem bool
	// grains are the session actors a cluster activated whose session is
	// still to be given to them, by session id (grain.go).
	grains grainTable
	// handoff holds the handles given to grains (given).
	handoff handoff
	// conns are the connections sessions may be attached to (Connect).
	conns conns
	turns *actor.PID
	// watch says when the folders a session's instructions come from
	// change (nil where inotify cannot be had: every turn looks again).
	watch *prompt.Watch
	// mailboxes runs every mailbox of this runtime.
	mailboxes *dispatcher
	cfg       *configs.Config
	// models are the selectable models by id, "default" among them;
	// modelList keeps their order for the selector.
	models    map[string]llm.Model
	modelList []NamedModel
	out       Outbox
	log       *slog.Logger
	// key signs the session files (nil: unsigned).
	key *store.Key
	// store keeps the sessions (Options.Store).
	store store.Backend
	// sandbox, sandboxMode and hidden are Options'.
	sandbox     *sandbox.Sandbox
	sandboxMode sandbox.Mode
	sandboxUser *sandbox.Ident
	shared      bool
	hidden      []string
	others      func(owner string) ([]string, error)

	client  Client
	metrics Metrics
	hooks   *hooks.Runner
	// http is fetch_content's client, shared by the sessions so that
	// connections are kept alive.
	http      *http.Client
	sensitive *tools.Sensitive
	toolDefs  []llm.ToolDef
	// runTool runs a prepared call (tools.Run); tests replace it before
	// spawning sessions to make a tool misbehave.
	runTool func(context.Context, tools.Env, *tools.Call) tools.Result
	// work runs the goroutines of model and tool actors (and session
	// writers' watchers), kept for reuse; Shutdown returns only once they
	// are done: every stream closed, every command's process group killed.
	work     gopool.Cache
	nextTurn atomic.Uint64
	// nextCall numbers tool calls call_1, call_2, … for the whole process.
	nextCall atomic.Uint64
	window   atomic.Int64
	// probe asks for the window; probing is set while it runs (warm.go).
	probe   Probe
	probing atomic.Bool
	// warmup is the warm-up waiting for quiet (warm.go).
	warmup warmer
	// ctx ends when the runtime shuts down: background work such as a
	// warm-up stops then.
	ctx  context.Context
	stop context.CancelFunc
}

// NewRuntime starts the actor system and its turn serializer. It takes a
// few milliseconds (protoactor builds a large process registry), so the edge
// starts it while it answers initialize.
func NewRuntime(o Options) *Runtime {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sys, own := o.System, o.System == nil
	if own {
		sys = NewSystem(log)
	}
	rt := &Runtime{sys: sys, ownSystem: own, cfg: o.Config, out: o.Out, client: o.Client, hooks: o.Hooks, log: log, key: o.Key,
		sensitive: o.Sensitive, toolDefs: toolDefs(), runTool: tools.Run}
	if rt.out == nil {
		rt.out = discard{root: sys.Root}
	}
	if rt.client == nil {
		rt.client = nobody{}
	}
	if w, err := prompt.NewWatch(); err == nil {
		rt.watch = w
	} else {
		log.Debug(fmt.Sprintf("instructions: no inotify (%v): each turn looks for them again", err))
	}
	rt.store = o.Store
	rt.sandbox, rt.sandboxMode, rt.hidden, rt.others = o.Sandbox, o.SandboxMode, o.Hidden, o.OthersFolders
	rt.sandboxUser, rt.shared = o.SandboxUser, o.Shared
	if rt.store == nil {
		rt.store = store.NewFileStore(o.Config.Sessions.Dir, &store.Reader{Key: o.Key, MaxBytes: int64(o.Config.Sessions.MaxFileBytes)}, nil, nil)
	}
	rt.metrics = o.Metrics
	if rt.metrics == nil {
		rt.metrics = noMetrics{}
	}
	rt.window.Store(int64(o.ContextWindow))
	rt.probe = o.Probe
	rt.ctx, rt.stop = context.WithCancel(context.Background())
	rt.modelList = append([]NamedModel{{ID: "default", Name: defaultModelName(o.Config), Model: o.Model, Vision: o.Config.Model.Vision}}, o.Models...)
	rt.models = make(map[string]llm.Model, len(rt.modelList))
	for _, m := range rt.modelList {
		rt.models[m.ID] = m.Model
	}
	rt.mailboxes = newDispatcher()
	rt.http = fetch.NewClient(rt.fetchLimits())
	rt.turns = rt.spawnTurns(o.Config.Turns.Concurrency)
	// What an mm killed before its sessions ended left of their outputs.
	rt.goWork(tools.SweepOutputs)
	rt.warm("default")
	return rt
}

// NewSystem makes an actor system as mm's actors need it: protoactor's
// logs on log (warnings and errors only: it writes a line per spawned
// actor at info), and dead letters let go of quickly. A node of mm's
// cluster makes its member's system so, and gives it to the runtime
// (Options.System).
func NewSystem(log *slog.Logger, opts ...actor.ConfigOption) *actor.ActorSystem {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Protoactor logs through this factory only; its default handler writes
	// colourised text, and its developer supervision logging (left off)
	// prints to stdout.
	actorLog := log.With("lib", "protoactor")
	return actor.NewActorSystem(append([]actor.ConfigOption{
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietActorLog(actorLog) }),
		// Messages that reach a stopped actor are expected when a session
		// stops mid-turn (its workers' last words); the throttle's timer
		// goroutine should not outlive that by a second.
		actor.WithDeadLetterThrottleInterval(10 * time.Millisecond),
	}, opts...)...)
}

// fetchLimits are fetch_content's limits from the config.
func (rt *Runtime) fetchLimits() fetch.Limits {
	f := rt.cfg.Tools.Fetch
	return fetch.Limits{Timeout: f.Timeout, MaxRedirects: f.MaxRedirects, MaxBytes: int64(f.MaxBytes)}
}

// agentConfigs are the configured agents, for the sessions' pools.
func (rt *Runtime) agentConfigs() []agents.Config {
	out := make([]agents.Config, len(rt.cfg.Agents))
	for i, a := range rt.cfg.Agents {
		out[i] = agents.Config{Name: a.Name, Command: a.Command, Args: a.Args, Env: a.Env}
	}
	return out
}

// props are the props of every actor of the runtime: a lock-free mailbox
// (the session's is a priority one, for cancels) run by the runtime's
// dispatcher, where no actor can keep the others from running.
func (rt *Runtime) props(producer actor.Producer, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(producer, append([]actor.PropsOption{
		actor.WithMailbox(actor.UnboundedLockfree()), actor.WithDispatcher(rt.mailboxes)}, opts...)...)
}

// Props are the props of an actor that is not a session's but lives beside
// them (a cluster's links and edges, package grains): a lock-free mailbox
// run by the runtime's dispatcher, like the runtime's own actors.
func (rt *Runtime) Props(receive actor.ReceiveFunc) *actor.Props {
	return rt.props(func() actor.Actor { return receive })
}

// quietActorLog keeps protoactor's warnings and errors but drops its
// per-actor info chatter (one line per spawned actor and future).
func quietActorLog(l *slog.Logger) *slog.Logger {
	return slog.New(levelFilter{l.Handler(), slog.LevelWarn})
}

type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

// SetContextWindow records the model's context window (0 = unknown).
func (rt *Runtime) SetContextWindow(n int) { rt.window.Store(int64(n)) }

// ContextWindow returns the model's context window, 0 if unknown.
func (rt *Runtime) ContextWindow() int { return int(rt.window.Load()) }

// Models lists the selectable models, "default" first.
func (rt *Runtime) Models() []NamedModel { return rt.modelList }

// defaultMode is the mode new sessions start in (config yolo).
func (rt *Runtime) defaultMode() string {
	if rt.cfg.Yolo {
		return ModeYolo
	}
	return ModeAsk
}

// DefaultMode is the mode a new session starts in.
func (rt *Runtime) DefaultMode() string { return rt.defaultMode() }

// windowFor returns the context window of a selectable model, 0 if unknown.
func (rt *Runtime) windowFor(id string) int {
	if id == "default" || id == "" {
		return rt.ContextWindow()
	}
	for _, m := range rt.modelList {
		if m.ID == id {
			return m.ContextWindow
		}
	}
	return 0
}

// visionFor says whether a selectable model takes images.
func (rt *Runtime) visionFor(id string) bool {
	for _, m := range rt.modelList {
		if m.ID == id || (id == "" && m.ID == "default") {
			return m.Vision
		}
	}
	return false
}

func defaultModelName(c *configs.Config) string {
	if c.Model.Name != "" && c.Model.Provider != "scripted" {
		return c.Model.Name
	}
	return c.Model.Provider
}

// NewSessionID makes a date-sortable id such as 20260916-101530-4f2a9c1e.
func NewSessionID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// NewMessageID names a model's reply, for the chunks that stream it (ACP's
// messageId, which must be a UUID): a random one (version 4).
func NewMessageID() string { return uuid.NewString() }

// Shutdown stops the turn serializer and the actor system, and waits (at
// most a few seconds) until the work goroutines of stopped sessions have
// finished: a command's process group is killed before the process exits.
// Sessions must be stopped first.
func (rt *Runtime) Shutdown() {
	rt.stop()
	rt.stopWarm()
	_ = rt.sys.Root.StopFuture(rt.turns).Wait()
	done := make(chan struct{})
	go func() {
		rt.work.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		rt.log.Warn("shutdown: some model or tool work did not stop in 3s")
	}
	if rt.ownSystem {
		rt.sys.Shutdown()
	}
	rt.mailboxes.close()
	rt.http.CloseIdleConnections()
	rt.watch.Close()
}

// goWork runs f in a goroutine Shutdown waits for.
func (rt *Runtime) goWork(f func()) { rt.work.Go(f) }

// errUnexpected reports a reply of the wrong type (a message for a session
// that stopped meanwhile comes back as something else).
func errUnexpected(res any) error {
	return fmt.Errorf("session stopped (reply %T)", res)
}

// oneLine makes an error text fit the one-line explanation of a failed turn.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// Root is the root context, for the edge's writer to deliver replies.
func (rt *Runtime) Root() *actor.RootContext { return rt.sys.Root }
