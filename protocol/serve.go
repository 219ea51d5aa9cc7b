package protocol

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/internal/gate"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
	"github.com/mm-agent/mm/tools"
)

// Options wires one connection.
type Options struct {
	Config *configs.Config
	Model  llm.Model
	// Models are the other models sessions may select (config models).
	Models []actors.NamedModel
	In     io.Reader // the client's messages (stdin)
	Out    io.Writer // JSON-RPC only (stdout)
	Log    *slog.Logger
	// ContextWindow is the model's window, 0 if unknown; SetContextWindow on
	// the returned Conn can set it later.
	ContextWindow int
	// Probe asks the server for the window while it is unknown, when the
	// connection starts and at each session/new; nil never probes.
	Probe actors.Probe
	// StateDir is the user's state directory (store.StateDir), where the
	// index of the folders holding saved sessions and the key that signs
	// session files are kept. "" keeps neither: session/list without a
	// cwd knows only this connection's folders, session files are written
	// unsigned, and no file is trusted to set a session's mode.
	StateDir string
}

// Conn is one served connection.
type Conn struct {
	agent   *Agent
	acp     *acp.AgentSideConnection
	out     *outbox
	pending *pending
	cancel  context.CancelFunc
}

// Start begins serving a connection; Wait ends it. It fails only on a
// configuration the runtime cannot use.
func Start(o Options) (*Conn, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sensitive, err := tools.NewSensitive(o.Config.Tools.Sensitive)
	if err != nil {
		return nil, fmt.Errorf("%w: tools.sensitive: %v", configs.ErrConfig, err)
	}
	// One writer for stdout: the SDK's responses and requests, the
	// outbox's batches and the ingress's errors each go out whole.
	out := &lockedWriter{w: o.Out}
	box := newOutbox(out, log)
	ctx, cancel := context.WithCancel(context.Background())
	key := store.OpenKey(o.StateDir, func(w string) { log.Warn("[acp] " + w) })
	files := &store.Reader{Key: key, MaxBytes: int64(o.Config.Sessions.MaxFileBytes), Warn: func(w string) { log.Warn("[acp] " + w) }}
	a := &Agent{cfg: o.Config, box: box, log: log, ctx: ctx, sessions: make(map[string]*actors.Session), lanes: map[string]*lane{},
		cwds: map[string]bool{}, ready: make(chan struct{}), creators: make(chan struct{}, maxCreating), folders: store.OpenFolders(o.StateDir), files: files}
	waiting := newPending(int(o.Config.ACP.MaxPending))
	in := newIngress(o.In, int(o.Config.ACP.MaxLineBytes), a, out, log, waiting)
	box.encode, box.answered, box.written = a.encode, in.answered, waiting.give
	// The SDK's SetLogger is not synchronised with its reader goroutine:
	// that goroutine's first read waits until the logger is set.
	gated := gate.New(in)
	conn := acp.NewAgentSideConnection(a, &sdkWriter{w: out, answered: waiting.give}, gated)
	conn.SetLogger(slog.New(quietEOF{log.Handler()}).With("lib", "acp"))
	gated.Open()
	a.conn = conn
	// The actor system is built while the client's initialize is read and
	// answered, which needs none of it; the session methods wait for it.
	go func() {
		if o.Config.Sessions.Enabled {
			// The key's file is read (or made) here rather than by the
			// first save, which a session actor waits for.
			key.Load()
		}
		a.rt = actors.NewRuntime(actors.Options{
			Config: o.Config, Model: o.Model, Models: o.Models, Out: box, Client: client{conn: conn, a: a}, Sensitive: sensitive,
			Hooks: &hooks.Runner{PreToolCallLines: o.Config.Hooks.PreToolCall, PostAskLines: o.Config.Hooks.PostAsk, Timeout: o.Config.Hooks.Timeout, Log: log},
			Log:   log, ContextWindow: o.ContextWindow, Probe: o.Probe, Key: key,
		})
		box.setRoot(a.rt.Root())
		close(a.ready)
	}()
	return &Conn{agent: a, acp: conn, out: box, pending: waiting, cancel: cancel}, nil
}

// sdkWriter is the SDK's way out. The responses it writes answer requests
// the ingress passed it, whose places in pending it gives back once
// written; its own requests (a permission request) and their cancels are
// not answers.
type sdkWriter struct {
	w        io.Writer
	answered func(int)
}

func (s *sdkWriter) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	// The SDK writes one message per Write: a response is the one with no
	// method.
	if !gjson.GetBytes(b, "method").Exists() {
		s.answered(1)
	}
	return n, err
}

// lockedWriter makes each Write one whole line (or batch of lines) on w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// quietEOF passes on the SDK's log records but one: the Info "connection
// closed" it logs when the client closes its side (cause "peer connection
// closed"). That is how every session with an editor ends, and how the
// README's smoke test ends; a line about it reads like a fault. A close for
// any other cause (a read error) is still logged.
type quietEOF struct{ slog.Handler }

func (q quietEOF) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && r.Message == "connection closed" {
		eof := false
		r.Attrs(func(a slog.Attr) bool {
			eof = a.Key == "cause" && a.Value.String() == "peer connection closed"
			return !eof
		})
		if eof {
			return nil
		}
	}
	return q.Handler.Handle(ctx, r)
}

func (q quietEOF) WithAttrs(as []slog.Attr) slog.Handler { return quietEOF{q.Handler.WithAttrs(as)} }

func (q quietEOF) WithGroup(g string) slog.Handler { return quietEOF{q.Handler.WithGroup(g)} }

// SetContextWindow records the model's context window once it is known.
func (c *Conn) SetContextWindow(n int) { c.agent.runtime().SetContextWindow(n) }

// Wait serves until the client closes its side or ctx ends, then answers
// every request read (prompts end cancelled), stops every session (each
// turn cancelled, its model stream closed, its commands and what they left
// running killed, its file final) and returns.
func (c *Conn) Wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-c.acp.Done():
	}
	a := c.agent
	// No session is created any more (those being created are answered),
	// and every prompt, running, queued or still to be served, ends
	// cancelled.
	a.mu.Lock()
	a.draining = true
	live := a.liveSessions()
	a.mu.Unlock()
	a.creating.Wait()
	for _, s := range live {
		s.Cancel()
	}
	// Stdin closing is no reason to drop answers: every request read is
	// answered before the sessions stop, unless the client stopped reading
	// too (no answer written for a second).
	if !c.pending.drain(time.Second) {
		a.log.Warn(fmt.Sprintf("shutdown: %d request(s) left unanswered: the client does not read", c.pending.count()))
	}
	c.pending.close()
	a.mu.Lock()
	a.closed = true
	sessions := a.liveSessions()
	a.mu.Unlock()
	actors.StopAll(sessions)
	a.calls.close()
	c.cancel()
	a.runtime() // a client may leave before the runtime is up
	// A client that stopped reading must not hold the process forever: the
	// last updates get a moment to drain, no more.
	if !c.out.closeWithin(time.Second) {
		a.log.Warn("shutdown: the client did not read the last updates")
	}
	a.rt.Shutdown()
}

// liveSessions lists the live sessions; a.mu is held.
func (a *Agent) liveSessions() []*actors.Session {
	out := make([]*actors.Session, 0, len(a.sessions))
	for _, s := range a.sessions {
		out = append(out, s)
	}
	return out
}

// isDraining says whether the connection is ending.
func (a *Agent) isDraining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.draining
}

// Serve is Start then Wait.
func Serve(ctx context.Context, o Options) error {
	c, err := Start(o)
	if err != nil {
		return err
	}
	c.Wait(ctx)
	return nil
}
