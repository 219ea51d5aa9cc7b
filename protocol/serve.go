package protocol

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/gate"
	"github.com/mm-agent/mm/llm"
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
}

// Conn is one served connection.
type Conn struct {
	agent *Agent
	acp   *acp.AgentSideConnection
	out   *outbox
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
	wout := newWireOut(o.Out)
	ob := newOutbox()
	a := &Agent{cfg: o.Config, out: wout, box: ob, log: log, sessions: make(map[string]*actors.Session), ready: make(chan struct{})}
	// The SDK's SetLogger is not synchronised with its reader goroutine:
	// that goroutine's first read waits until the logger is set.
	wi := newWireIn(o.In, wout)
	wi.prompt = func(job promptJob) {
		if job.needsIO() {
			a.prompts.Go(func() { a.servePrompt(job) })
			return
		}
		// Starting a turn is a lookup and a message: done here, in
		// wire order.
		a.servePrompt(job)
	}
	wi.cancel = a.cancelSession
	in := gate.New(wi)
	conn := acp.NewAgentSideConnection(a, wout, in)
	conn.SetLogger(log.With("lib", "acp"))
	in.Open()
	a.conn = conn
	// The actor system is built while the client's initialize is read and
	// answered, which needs none of it; the session methods wait for it.
	go func() {
		a.rt = actors.NewRuntime(actors.Options{
			Config: o.Config, Model: o.Model, Models: o.Models, Out: ob, Perm: conn, Sensitive: sensitive,
			Log: log, ContextWindow: o.ContextWindow,
		})
		ob.start(wout, log, a.rt.Root())
		close(a.ready)
	}()
	return &Conn{agent: a, acp: conn, out: ob}, nil
}

// SetContextWindow records the model's context window once it is known.
func (c *Conn) SetContextWindow(n int) { c.agent.runtime().SetContextWindow(n) }

// Wait serves until the client closes its side or ctx ends, then cancels
// every turn, stops every session (their model streams and processes with
// them) and returns.
func (c *Conn) Wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-c.acp.Done():
	}
	c.agent.mu.Lock()
	sessions := make([]*actors.Session, 0, len(c.agent.sessions))
	for _, s := range c.agent.sessions {
		sessions = append(sessions, s)
	}
	c.agent.mu.Unlock()
	for _, s := range sessions {
		s.Stop()
	}
	// Their prompts have answered (cancelled); the handlers can end.
	c.agent.prompts.Close()
	c.agent.runtime() // a client may leave before the runtime is up
	// A client that stopped reading must not hold the process forever: the
	// last updates get a moment to drain, no more.
	if !c.out.closeWithin(time.Second) {
		c.agent.log.Warn("shutdown: the client did not read the last updates")
	}
	c.agent.rt.Shutdown()
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
