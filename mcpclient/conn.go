package mcpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mm-agent/mm/internal/procs"
)

// These bounds keep Close from waiting on a server that misbehaves; a
// well-behaved one exits as soon as its input ends, and none of them is
// felt.
const (
	// terminateGrace is the SDK's wait, once a stdio server's input is
	// closed, before it sends SIGTERM, and again before SIGKILL.
	terminateGrace = 2 * time.Second
	// closeGrace bounds the SDK's graceful close of a connection; after it
	// the server's process group is killed, which ends whatever the close
	// waits for.
	closeGrace = 3 * time.Second
	// groupGoneWait bounds the wait for the killed group's members to be
	// dead: a member stuck in an uninterruptible sleep must not hold Close.
	groupGoneWait = 5 * time.Second
	// stderrWait bounds the wait for the end of a server's stderr once its
	// group is dead: a process that left the group may still hold it.
	stderrWait = time.Second
	// maxStderrLine cuts the lines of a server's stderr, so that a server
	// that writes without newlines cannot grow the buffer without bound.
	maxStderrLine = 16 << 10
)

// connState is where a server is in its life, for the errors that Call
// writes for the model.
type connState int

const (
	starting connState = iota
	running
	stopped
)

// conn is one server of a Sessions. Its goroutine (run) owns the
// connection, the process group and the pipes, and gives them back before
// it returns.
type conn struct {
	s         *Sessions
	srv       Server
	sanitized string // the server's name as in its tools' names

	// Under s.mu.
	state connState
	cs    *mcp.ClientSession // nil unless running
	tools []Tool

	// group is the process group of a stdio server (a job object on
	// Windows), nil for an HTTP one. The time limit of the connection
	// attempt kills it from another goroutine, before it is started too.
	group *procs.Group

	// cut is set when a page of the listing was cut (bound.go).
	cut atomic.Bool

	// askers are the calls in flight that can ask the user (elicit.go).
	askers askers

	// Owned by run's goroutine.
	warned           map[string]bool // the last listing's warnings
	stderrR, stderrW *os.File
	stderrDone       chan struct{} // closed when the copy of stderr has returned
	stderrLog        *lineLog
	httpTr           *http.Transport
}

// run connects to the server, keeps its tools up to date while it runs, and
// disconnects when the session closes or the server goes away.
func (c *conn) run(cwd, sessionID string) {
	ctx := c.s.ctx
	defer c.release()

	relist := make(chan struct{}, 1)
	client := mcp.NewClient(implementation(), &mcp.ClientOptions{
		Logger: c.s.log.With("mcp_server", c.srv.Name),
		// mm answers none of the requests a server may send (roots,
		// sampling, forms) but URL elicitation, and that only for a client
		// that shows pages (elicit.go), so it claims no other capability: a
		// server then keeps to its own configuration, such as the
		// directories it was given on its command line.
		Capabilities: c.s.capabilities(),
		// The handler runs on the SDK's goroutine, where a request of ours
		// (the listing) would wait behind the handler itself; run lists
		// instead. Notifications that arrive during a listing fold into
		// one more listing.
		ElicitationHandler: c.elicitation(),
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case relist <- struct{}{}:
			default:
			}
		},
	})

	t, err := c.transport(cwd, sessionID)
	if err == nil {
		var cs *mcp.ClientSession
		if cs, err = c.connect(ctx, client, t); err == nil {
			c.serve(ctx, cs, relist)
			return
		}
	}
	c.s.setTools(c, stopped, nil, nil)
	if ctx.Err() == nil {
		c.s.warn(fmt.Sprintf("MCP server %q did not start: %v", c.srv.Name, err))
	}
}

// serve keeps the tools of a connected server up to date until the session
// closes or the server goes away, and then disconnects.
func (c *conn) serve(ctx context.Context, cs *mcp.ClientSession, relist <-chan struct{}) {
	// Wait returns once the connection is over: for a stdio server, when
	// its output ends, which is when it exits.
	waitDone := make(chan error, 1)
	go func() { waitDone <- cs.Wait() }()

	c.s.setTools(c, running, cs, nil)
	c.list(ctx, cs)
	for {
		select {
		case <-relist:
			c.list(ctx, cs)
		case err := <-waitDone:
			c.s.setTools(c, stopped, nil, nil)
			msg := fmt.Sprintf("MCP server %q stopped", c.srv.Name)
			if err != nil {
				msg += ": " + err.Error()
			}
			c.s.warn(msg)
			c.disconnect(cs, nil)
			return
		case <-ctx.Done():
			c.disconnect(cs, waitDone)
			return
		}
	}
}

// transport prepares the SDK transport for the server: a command, run in
// the session's cwd in a process group of its own, or a streamable HTTP
// endpoint.
func (c *conn) transport(cwd, sessionID string) (mcp.Transport, error) {
	switch {
	case c.srv.Unsupported != "":
		return nil, errors.New(c.srv.Unsupported)
	case c.srv.Command != "": // a command wins over a URL: it is what runs locally
		cmd := exec.Command(c.srv.Command, c.srv.Args...)
		cmd.Dir = cwd
		cmd.Env = c.env(sessionID)
		started := func() {}
		if c.s.confine != nil {
			var err error
			if started, err = c.s.confine(cmd); err != nil {
				return nil, err
			}
		}
		// A group of its own lets Close kill what the server leaves behind,
		// and keeps signals meant for mm's group off the server.
		c.group = procs.NewGroup(cmd)
		// Stderr is a pipe this package owns rather than an io.Writer
		// that os/exec would copy from: exec's Wait, which the SDK calls,
		// would then wait for every holder of the pipe, children left in
		// the background included.
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = pw
		c.stderrR, c.stderrW = pr, pw
		c.stderrLog = &lineLog{log: c.s.log, server: c.srv.Name}
		c.stderrDone = make(chan struct{})
		go func() {
			defer close(c.stderrDone)
			procs.CopyPipe(pr, c.stderrLog)
		}()
		// The SDK's CommandTransport starts the command and waits for it
		// (in its Close), so the command is not registered with
		// procs.Start/Done: mm's orphan reaper may take the exit status of
		// a server that died before the SDK's Wait, which then only reports
		// an error that nothing needs.
		return &boundedTransport{c: c, inner: &startedTransport{inner: &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateGrace}, c: c, started: started}}, nil
	case c.srv.URL != "":
		// A transport of its own, so that Close can drop its idle
		// connections (and their goroutines) without touching anyone
		// else's.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		c.httpTr = tr
		var rt http.RoundTripper = tr
		if len(c.srv.Headers) > 0 {
			rt = &headerTransport{base: tr, headers: maps.Clone(c.srv.Headers)}
		}
		return &boundedTransport{c: c, inner: &mcp.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: &http.Client{Transport: rt}}}, nil
	default:
		return nil, errors.New("it has neither a command nor a URL")
	}
}

// env is the server's environment: mm's, the server's own, and the mark of
// the session last, so that no server setting can remove the mark that
// procs.KillSession finds the session's processes by.
func (c *conn) env(sessionID string) []string {
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(c.srv.Env)) {
		env = append(env, k+"="+c.srv.Env[k])
	}
	return append(env, procs.SessionEnv(sessionID))
}

// connect makes one connection attempt, within the time limit.
func (c *conn) connect(ctx context.Context, client *mcp.Client, t mcp.Transport) (*mcp.ClientSession, error) {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// A server that does not answer in time, or that is still starting
	// when the session closes, is killed at once rather than through the
	// SDK's graceful close (input closed, then SIGTERM, then SIGKILL,
	// seconds apart): it is not answering anyway.
	stop := context.AfterFunc(cctx, c.killGroup)
	cs, err := client.Connect(cctx, t, nil)
	stop()
	// The server has its own copy of the pipe's write end by now; without
	// closing this one, the pipe would never end.
	if c.stderrW != nil {
		c.stderrW.Close()
		c.stderrW = nil
	}
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("it did not answer within %v", connectTimeout)
	}
	return cs, err
}

// list lists the server's tools and offers them, within the bounds of
// offer.go: the listing stops once the server's MaxTools are taken and one
// more is listed. A server that offers no tools is not asked: it would
// answer with an error.
func (c *conn) list(ctx context.Context, cs *mcp.ClientSession) {
	if ir := cs.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Tools == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	o := newOffer(c.srv)
	c.cut.Store(false)
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			// A server that went away is reported by serve, once.
			if ctx.Err() == nil && !errors.Is(err, mcp.ErrConnectionClosed) {
				c.s.warn(fmt.Sprintf("MCP server %q did not list its tools: %v", c.srv.Name, err))
			}
			return
		}
		if !o.add(toTool(c.srv, t)) {
			break
		}
	}
	if c.cut.Load() {
		o.full = true
	}
	// A server may list again and again (notifications/tools/list_changed):
	// a warning that the last listing gave too is not told again. The
	// warnings go before the tools: a session hears both in the order
	// told, so the turn that first offers the tools also says what was
	// left out of them, never the turn after.
	warned := map[string]bool{}
	for _, w := range o.warnings() {
		warned[w] = true
		if !c.warned[w] {
			c.s.warn(w)
		}
	}
	c.warned = warned
	c.s.setTools(c, running, cs, o.tools)
}

// disconnect closes the connection gracefully, as the MCP specification
// asks (for stdio: input closed, the server exits), and kills the server's
// group if that takes too long. waitDone, when not nil, is the result of
// cs.Wait still to be received, so that its goroutine is gone too.
func (c *conn) disconnect(cs *mcp.ClientSession, waitDone <-chan error) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = cs.Close()
	}()
	timer := time.NewTimer(closeGrace)
	select {
	case <-closed:
	case <-timer.C:
		c.s.log.Debug("MCP server did not close in time; killing its process group", "server", c.srv.Name)
		c.killGroup()
		<-closed
	}
	timer.Stop()
	if waitDone != nil {
		<-waitDone
	}
}

// killGroup kills the server's process group, if it has one.
func (c *conn) killGroup() {
	if c.group != nil {
		c.group.Kill()
	}
}

// release gives back what the server leaves once disconnected: the
// processes left in its group, its stderr pipe, its idle HTTP connections.
func (c *conn) release() {
	if c.stderrW != nil {
		c.stderrW.Close() // in case the attempt never got to connect
	}
	if c.group != nil {
		c.group.Kill()
		c.group.WaitGone(time.Now().Add(groupGoneWait))
		c.group.Close()
	}
	if c.stderrR != nil {
		procs.FinishPipe(c.stderrR, c.stderrLog, c.stderrDone, time.Now().Add(stderrWait))
		c.stderrLog.flush()
	}
	if c.httpTr != nil {
		c.httpTr.CloseIdleConnections()
	}
}

// startedTransport is the SDK's CommandTransport, noting the process it
// started: the group to kill is known only once the SDK has started it.
type startedTransport struct {
	inner *mcp.CommandTransport
	c     *conn
	// started closes what the sandbox opened for the start (the
	// session's confine), once the SDK has started the command.
	started func()
}

func (t *startedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	t.started()
	if err != nil {
		return nil, err
	}
	if err := t.c.group.Started(); err != nil {
		_ = conn.Close() // the server is killed already; this reaps it
		return nil, err
	}
	// The attempt's time limit may have passed, or the session closed,
	// before the group was known, when killing found no group to kill.
	if ctx.Err() != nil {
		t.c.killGroup()
	}
	return conn, nil
}

// headerTransport adds the server's headers (authorization, mostly) to
// every request of an HTTP server.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context()) // a RoundTripper must not change its request
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// lineLog writes a server's stderr to the debug log, a line per record.
// Only one goroutine writes at a time: the copy, then, once it has
// returned, the final drain.
type lineLog struct {
	log    *slog.Logger
	server string
	buf    []byte
}

func (w *lineLog) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxStderrLine {
		w.emit(w.buf)
		w.buf = nil
	}
	return len(p), nil
}

// flush logs what is left after the last newline.
func (w *lineLog) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *lineLog) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) > 0 {
		w.log.Debug("MCP server stderr", "server", w.server, "line", string(line))
	}
}
