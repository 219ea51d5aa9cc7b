package protocol

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// A Hub is what every connection of a process shares: one actor runtime
// (its turn serializer, its sessions) and the table of the live sessions,
// each owned by the token that created it and attached to at most one
// connection. `mm -acp` has one connection on it; `mm serve` one per
// client. A session's requests are served by the connection it is
// attached to; a connection of the same owner takes it over with
// session/load or session/resume (its turns on the old connection end
// cancelled first), and a connection that ends leaves its sessions
// detached, live and loadable. Everything a session says goes to the
// outbox of the connection it is attached to: the session actor holds it,
// and moves it in its mailbox's order (actors.Session.Attach).
type Hub struct {
	cfg *configs.Config
	log *slog.Logger
	// store keeps the sessions: the files under sessions.dir, or
	// Postgres (store.url).
	store store.Backend

	// ready is closed once rt is set; only runtime() reads rt before that.
	// begin starts the runtime once: at NewHub, or (DeferRuntime) once
	// initialize is answered or another request read.
	begin     sync.Once
	beginFunc func()
	rt        *actors.Runtime
	ready     chan struct{}

	mu       sync.Mutex
	sessions map[string]*entry
	// lanes hold the requests of sessions being opened or closed
	// (order.go).
	lanes map[string]*lane
	// closed is set once the hub shuts down: no session is registered any
	// more.
	closed   bool
	shutdown sync.Once
}

// entry is a live session: whose it is, and which connection holds it.
type entry struct {
	s     *actors.Session
	owner string
	conn  *Agent // nil: detached
}

// HubOptions wires a Hub.
type HubOptions struct {
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
	// DeferRuntime starts the runtime only once initialize is answered, or
	// another request read (StartRuntime): mm -acp's, whose editor waits
	// for that answer. protoactor's actor system alone takes about 3 ms
	// and 2.8 MB on 66,000 allocations (its process registry), which
	// delayed the answer, on two cores, by as much again.
	DeferRuntime bool
}

// NewHub starts the actor runtime in the background (it takes a few
// milliseconds, which the first connection's initialize does not wait
// for; with DeferRuntime, not before it is answered). It fails on a configuration the runtime cannot use, and on a
// store.url whose database cannot be reached or its tables made.
func NewHub(o HubOptions) (*Hub, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sensitive, err := tools.NewSensitive(o.Config.Tools.Sensitive)
	if err != nil {
		return nil, fmt.Errorf("%w: tools.sensitive: %v", configs.ErrConfig, err)
	}
	key := store.OpenKey(o.StateDir, func(w string) { log.Warn("[acp] " + w) })
	backend, err := openStore(o.Config, key, o.StateDir, log)
	if err != nil {
		return nil, err
	}
	h := &Hub{cfg: o.Config, log: log, ready: make(chan struct{}), sessions: map[string]*entry{}, lanes: map[string]*lane{},
		store: backend}
	h.beginFunc = func() { go h.startRuntime(o, key, sensitive, log) }
	if !o.DeferRuntime {
		h.StartRuntime()
	}
	return h, nil
}

// StartRuntime starts the actor runtime in the background unless it is
// started; runtime() waits for it.
func (h *Hub) StartRuntime() { h.begin.Do(h.beginFunc) }

func (h *Hub) startRuntime(o HubOptions, key *store.Key, sensitive *tools.Sensitive, log *slog.Logger) {
	if o.Config.Sessions.Enabled {
		// The key's file is read (or made) here rather than by the
		// first save, which a session actor waits for.
		key.Load()
	}
	h.rt = actors.NewRuntime(actors.Options{
		Config: o.Config, Model: o.Model, Models: o.Models, Sensitive: sensitive,
		Hooks: &hooks.Runner{PreToolCallLines: o.Config.Hooks.PreToolCall, PostAskLines: o.Config.Hooks.PostAsk, Timeout: o.Config.Hooks.Timeout, Log: log},
		Log:   log, ContextWindow: o.ContextWindow, Probe: o.Probe, Key: key, Metrics: o.Metrics, Store: h.store,
		SelfStopped: h.forget,
	})
	close(h.ready)
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
			store.OpenFolders(stateDir)), nil
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

// runtime returns the actor runtime, starting it if need be and waiting
// for it to be up.
func (h *Hub) runtime() *actors.Runtime {
	h.StartRuntime()
	<-h.ready
	return h.rt
}

// started returns the runtime once something else has started it.
func (h *Hub) started() *actors.Runtime {
	<-h.ready
	return h.rt
}

// SetContextWindow records the model's context window once it is known.
func (h *Hub) SetContextWindow(n int) { h.runtime().SetContextWindow(n) }

// Shutdown stops every session (each turn cancelled, its commands killed,
// its file final) and the runtime. The hub's connections must be over.
// A second call does nothing.
func (h *Hub) Shutdown() {
	h.shutdown.Do(func() {
		h.stopSessions()
		h.runtime().Shutdown()
		h.store.Close()
	})
}

// stopSessions stops every session and registers none any more.
func (h *Hub) stopSessions() {
	h.mu.Lock()
	h.closed = true
	all := make([]*actors.Session, 0, len(h.sessions))
	for _, e := range h.sessions {
		all = append(all, e.s)
	}
	clear(h.sessions)
	h.mu.Unlock()
	actors.StopAll(all)
}

// Sessions counts the live sessions, attached or not.
func (h *Hub) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// register adds a session a connection created or opened, attached to it;
// once the hub or the connection is closing, the session is stopped and
// refused.
func (h *Hub) register(s *actors.Session, owner string, a *Agent) (*actors.Session, error) {
	h.mu.Lock()
	closed := h.closed || a.isClosed()
	if !closed {
		h.sessions[s.ID] = &entry{s: s, owner: owner, conn: a}
	}
	h.mu.Unlock()
	if closed {
		s.Stop()
		return nil, errShuttingDown
	}
	return s, nil
}

// attached returns session id when connection a holds it.
func (h *Hub) attached(id string, a *Agent) *actors.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.sessions[id]; e != nil && e.conn == a {
		return e.s
	}
	return nil
}

// owned returns live session id when it belongs to owner ("" owns every
// session: mm -acp's user), with the connection that holds it, if any.
// Another owner's session does not exist for them.
func (h *Hub) owned(id, owner string) (*actors.Session, *Agent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	if e == nil || (owner != "" && e.owner != owner) {
		return nil, nil
	}
	return e.s, e.conn
}

// taken says whether live session id belongs to someone else than owner.
func (h *Hub) taken(id, owner string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	return e != nil && owner != "" && e.owner != owner
}

// move records that connection a now holds session id.
func (h *Hub) move(id string, a *Agent) {
	h.mu.Lock()
	if e := h.sessions[id]; e != nil {
		e.conn = a
	}
	h.mu.Unlock()
}

// unregister removes session id from the table when connection a holds
// it, and returns it.
func (h *Hub) unregister(id string, a *Agent) *actors.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	if e == nil || e.conn != a {
		return nil
	}
	delete(h.sessions, id)
	return e.s
}

// remove takes live session id out of the table when it belongs to owner,
// whichever connection holds it, and returns it.
func (h *Hub) remove(id, owner string) *actors.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.sessions[id]
	if e == nil || (owner != "" && e.owner != owner) {
		return nil
	}
	delete(h.sessions, id)
	return e.s
}

// forget takes session s out of the table, if it is still there, when it
// stops by itself (another mm took it over): its id is unknown here from
// now on, until a session/load takes it up again.
func (h *Hub) forget(s *actors.Session) {
	h.mu.Lock()
	if e := h.sessions[s.ID]; e != nil && e.s == s {
		delete(h.sessions, s.ID)
	}
	h.mu.Unlock()
}

// heldBy lists the sessions connection a holds.
func (h *Hub) heldBy(a *Agent) []*actors.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*actors.Session
	for _, e := range h.sessions {
		if e.conn == a {
			out = append(out, e.s)
		}
	}
	return out
}

// detach leaves the sessions connection a holds to no connection: live,
// loadable by their owner from another connection.
func (h *Hub) detach(a *Agent) {
	for _, s := range h.heldBy(a) {
		h.mu.Lock()
		e := h.sessions[s.ID]
		mine := e != nil && e.conn == a
		if mine {
			e.conn = nil
		}
		h.mu.Unlock()
		if mine {
			_ = s.Attach(nil, nil)
		}
	}
}

// cwdsOf lists the folders of the live sessions owner may see.
func (h *Hub) cwdsOf(owner string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.sessions {
		if owner == "" || e.owner == owner {
			out = append(out, e.s.Cwd)
		}
	}
	return out
}

// Drain waits until no live session runs or queues a turn, or until ctx
// ends; then the turns still running are cancelled, and Drain returns
// once they have ended. A node of a cluster that leaves drains so.
func (h *Hub) Drain(ctx context.Context) {
	h.mu.Lock()
	live := make([]*actors.Session, 0, len(h.sessions))
	for _, e := range h.sessions {
		live = append(live, e.s)
	}
	h.mu.Unlock()
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		for _, s := range live {
			s.Settle()
		}
	}()
	select {
	case <-settled:
		return
	case <-ctx.Done():
	}
	for _, s := range live {
		s.Cancel()
	}
	<-settled
}

// Holds says whether session id is live on this hub.
func (h *Hub) Holds(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id] != nil
}
