package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/registry"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// A Hub is what every connection of a process shares: one actor runtime
// (its turn serializer, its sessions), the store, and the table of the
// live sessions (registry), each owned by the token that created it and
// attached to at most one connection. `mm -acp` has one connection on it;
// `mm serve` one per client. A session's requests are served by the
// connection it is attached to; a connection of the same owner takes it
// over with session/load or session/resume (its turns on the old
// connection end cancelled first), and a connection that ends leaves its
// sessions detached, live and loadable. Everything a session says goes to
// the outbox of the connection it is attached to: the session actor holds
// it, and moves it in its mailbox's order (actors.Session.Attach).
//
// The hub makes none of its parts: app builds the store, the
// runtime and what they need from the config, and hands them over here.
type Hub struct {
	cfg *configs.Config
	log *slog.Logger
	// store keeps the sessions: the files under sessions.dir, or
	// Postgres (store.url).
	store store.Backend
	// sessions is the table of the live sessions.
	sessions *registry.Table[*actors.Session, *Caller]
	// sharedFolders are serve.sharedFolders, links followed: every
	// token's, no token's (owners.go).
	sharedFolders []string

	// ready is closed once rt is set; only runtime() reads rt before that.
	// begin starts the runtime once: at NewHub, or (DeferRuntime) once
	// initialize is answered or another request read.
	begin     sync.Once
	beginFunc func()
	rt        *actors.Runtime
	ready     chan struct{}

	shutdown sync.Once
	// limits bound what a token holds (shared hubs); stop ends, and
	// janitor waits for, the stop of detached sessions (stopDetached).
	limits  Limits
	stop    chan struct{}
	janitor sync.WaitGroup

	// decodes counts the requests whose params this hub's connections
	// decoded (Decodes).
	decodes atomic.Uint64
}

// Decodes is how many requests' params the hub's connections have decoded
// from JSON: a figure. In a cluster a request is decoded on the node of
// its client's connection, and nowhere else.
// Store is where the hub's sessions are kept.
func (h *Hub) Store() store.Backend { return h.store }

func (h *Hub) Decodes() uint64 { return h.decodes.Load() }

// HubOptions wires a Hub.
type HubOptions struct {
	Config *configs.Config
	Log    *slog.Logger
	// Store keeps the sessions; the hub closes it at Shutdown.
	Store store.Backend
	// Runtime makes the actor runtime, on a goroutine of the hub's;
	// others is to be its OthersFolders.
	Runtime func(others func(owner string) ([]string, error)) *actors.Runtime
	// Limits bound what one token holds on a shared hub (mm serve).
	Limits Limits
	// DeferRuntime starts the runtime only once initialize is answered, or
	// another request read (StartRuntime): mm -acp's, whose editor waits
	// for that answer. protoactor's actor system alone takes about 3 ms
	// and 2.8 MB on 66,000 allocations (its process registry), which
	// delayed the answer, on two cores, by as much again.
	DeferRuntime bool
}

// Limits bound what one token (a connection's owner) holds on a shared hub:
// mm serve's, on each node of a cluster its own. Zero is no limit.
type Limits struct {
	// SessionsPerToken bounds a token's live sessions
	// (serve.maxSessionsPerToken); MCPPerToken the MCP server processes
	// they run (serve.maxMCPProcessesPerToken). A request that would pass
	// either is refused, saying which.
	SessionsPerToken, MCPPerToken int
	// DetachedIdle stops a session that no connection has held for this
	// long (serve.detachedIdle), when sessions are saved: its file stays,
	// loadable.
	DetachedIdle time.Duration
}

// NewHub starts the actor runtime in the background (it takes a few
// milliseconds, which the first connection's initialize does not wait
// for; with DeferRuntime, not before it is answered).
func NewHub(o HubOptions) *Hub {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{cfg: o.Config, log: log, ready: make(chan struct{}), limits: o.Limits, stop: make(chan struct{}),
		store: o.Store, sessions: registry.New[*actors.Session, *Caller]()}
	for _, f := range o.Config.Serve.SharedFolders {
		h.sharedFolders = append(h.sharedFolders, tools.RealPath(f))
	}
	if o.Limits.DetachedIdle > 0 && o.Config.Sessions.Enabled {
		h.janitor.Add(1)
		go h.stopDetached(o.Limits.DetachedIdle)
	}
	h.beginFunc = func() {
		go func() {
			h.rt = o.Runtime(h.othersFolders)
			close(h.ready)
		}()
	}
	if !o.DeferRuntime {
		h.StartRuntime()
	}
	return h
}

// StartRuntime starts the actor runtime in the background unless it is
// started; runtime() waits for it.
func (h *Hub) StartRuntime() { h.begin.Do(h.beginFunc) }

// runtime returns the actor runtime, starting it if need be and waiting
// for it to be up.
func (h *Hub) runtime() *actors.Runtime {
	h.StartRuntime()
	<-h.ready
	return h.rt
}

// Runtime returns the actor runtime, starting it if need be and waiting
// for it to be up: a node of mm's cluster spawns its session grains with
// it (package grains).
func (h *Hub) Runtime() *actors.Runtime { return h.runtime() }

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
		close(h.stop)
		h.janitor.Wait()
		h.stopSessions()
		h.runtime().Shutdown()
		h.store.Close()
	})
}

// stopSessions stops every session and registers none any more.
func (h *Hub) stopSessions() { actors.StopAll(h.sessions.Close()) }

// Sessions counts the live sessions, attached or not.
func (h *Hub) Sessions() int { return h.sessions.Len() }

// register adds a session a connection created or opened, attached to it,
// with the MCP server processes it runs; once the hub or the connection is
// closing, or when its owner would pass a limit, the session is stopped
// and refused.
func (h *Hub) register(s *actors.Session, owner string, a *Caller, mcp int) (*actors.Session, error) {
	err := h.sessions.Add(s.ID, s.Cwd, s, owner, a, mcp, func(sessions, procs int) error {
		if a.isClosed() {
			return errShuttingDown
		}
		return h.room(a, sessions, procs, mcp)
	})
	if err != nil {
		s.Stop()
		if errors.Is(err, registry.ErrClosed) {
			err = errShuttingDown
		}
		return nil, err
	}
	return s, nil
}

// room says why caller a may not have one more session running mcp MCP
// server processes, when its owner has sessions and procs already; nil
// when it may.
func (h *Hub) room(a *Caller, sessions, procs, mcp int) error {
	if !a.shared {
		return nil
	}
	if n := h.limits.SessionsPerToken; n > 0 && sessions >= n {
		return jsonrpc.Internal(fmt.Sprintf("token %s has %d live sessions on this server, its limit (serve.maxSessionsPerToken): close one (session/close) first", a.owner, sessions),
			map[string]any{"limit": "serve.maxSessionsPerToken", "sessions": sessions})
	}
	if n := h.limits.MCPPerToken; n > 0 && mcp > 0 && procs+mcp > n {
		return jsonrpc.Internal(fmt.Sprintf("token %s runs %d MCP server processes on this server; %d more would pass its limit of %d (serve.maxMCPProcessesPerToken): close a session first", a.owner, procs, mcp, n),
			map[string]any{"limit": "serve.maxMCPProcessesPerToken", "processes": procs})
	}
	return nil
}

// stopDetached stops, every now and then, the sessions no connection has
// held for idle: they are saved, and loadable again.
func (h *Hub) stopDetached(idle time.Duration) {
	defer h.janitor.Done()
	tick := time.NewTicker(min(max(idle/4, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		for _, s := range h.sessions.TakeDetached(time.Now().Add(-idle)) {
			h.log.Info(fmt.Sprintf("[acp] session %s stopped: no connection held it for %s (serve.detachedIdle); its file is kept", s.ID, idle))
			go s.Close()
		}
	}
}

// detach leaves the sessions connection a holds to no connection: live,
// loadable by their owner from another connection.
func (h *Hub) detach(a *Caller) {
	for _, s := range h.sessions.HeldBy(a) {
		if h.sessions.Detach(s.ID, a) {
			_ = s.Attach(0)
		}
	}
}

// Drain waits until no live session runs or queues a turn, or until ctx
// ends; then the turns still running are cancelled, and Drain returns
// once they have ended. A node of a cluster that leaves drains so.
func (h *Hub) Drain(ctx context.Context) {
	live := h.sessions.All()
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
		s.Cancel(nil)
	}
	<-settled
}

// Holds says whether session id is live on this hub.
func (h *Hub) Holds(id string) bool { return h.sessions.Holds(id) }
