package lsp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.lsp.dev/jsonrpc2"
	"go.lsp.dev/protocol"
	"go.lsp.dev/uri"
	"go.uber.org/zap"

	"github.com/mm-agent/mm/internal/procs"
)

const (
	// initTimeout bounds the wait for the initialize response. Servers
	// answer it before they load the workspace, so a minute means the
	// server is stuck, not busy.
	initTimeout = time.Minute
	// shutdownTimeout bounds the wait for the shutdown response, and
	// exitGrace the wait for the process to end after exit; then its group
	// is killed.
	shutdownTimeout = time.Second
	exitGrace       = time.Second
	// pipeGrace bounds the wait for the end of a server's output once it is
	// reaped: a process that left its group may hold the pipes open.
	pipeGrace = time.Second
)

// server is one running language server and its connection.
type server struct {
	name string // the command's base name, for messages
	lang string
	root string // the workspace root, the session's cwd
	pid  int
	log  *slog.Logger
	// group holds the server and the helpers it spawns.
	group *procs.Group

	conn jsonrpc2.Conn
	rpc  protocol.Server
	caps protocol.ServerCapabilities
	// timeout is lsp.timeout, which also bounds each write to the server.
	timeout time.Duration
	// frames is the connection's stream, which the answerer writes to.
	frames *frames
	// answers are the answers to the server's requests, waiting for the
	// answerer to write them (clientside.go); maxUnread at most.
	answers chan *jsonrpc2.Response

	// ctx is done once the server can no longer answer: its process ended
	// or its connection broke. Its cause says why, for the model.
	ctx    context.Context
	cancel context.CancelCauseFunc
	exited chan struct{} // closed once the process is reaped
	gone   chan struct{} // closed once every goroutine of the server has ended
	reaped atomic.Bool

	stderr *stderrLog

	// What the server has been told about files; only the holder of the
	// slot's turn touches these (documents.go).
	docs   map[string]*document
	stamps map[string]stamp
	clock  int64
}

// splitCommand splits a configured command line on spaces and expands a
// leading ~ in each word, since the line is not run by a shell.
func splitCommand(line string) []string {
	words := strings.Fields(line)
	home, err := os.UserHomeDir()
	if err != nil {
		return words
	}
	for i, w := range words {
		if w == "~" {
			words[i] = home
		} else if strings.HasPrefix(w, "~/") {
			words[i] = filepath.Join(home, w[2:])
		}
	}
	return words
}

// start starts the slot's server, initializes it and records it in the
// slot. The caller holds the slot's turn.
func (c *Client) start(s *slot) (*server, error) {
	line := c.servers[s.lang]
	argv := splitCommand(line)
	if len(argv) == 0 {
		return nil, fmt.Errorf("no language server is configured for %s; configure lsp.servers.%s", s.lang, s.lang)
	}
	name := filepath.Base(argv[0])
	failed := func(why string) error {
		return fmt.Errorf("%s did not start: %s", name, oneLine(why))
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.cwd
	cmd.Env = append(os.Environ(), procs.SessionEnv(c.sessionID))
	started := func() {}
	if c.confine != nil {
		var err error
		if started, err = c.confine(cmd); err != nil {
			return nil, failed(err.Error())
		}
	}
	defer started() // once the server has started, or failed to
	// Its own group, so that killing the group takes the helpers it spawns.
	group := procs.NewGroup(cmd)
	// The pipes are made here rather than by exec: exec would close the
	// output pipe in Wait, racing the reader for the server's last words,
	// and an io.Writer would make Wait wait for every holder of the pipe.
	// Given *os.File ends, exec hands them to the child as they are.
	p, err := newPipes()
	if err != nil {
		return nil, failed(err.Error())
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		p.closeAll()
		return nil, errClosed
	}
	err = group.Start()
	p.closeChildEnds()
	if err != nil {
		c.mu.Unlock()
		p.closeOurEnds()
		return nil, failed(startError(err, s.lang, line))
	}
	srv := &server{
		name:   name,
		lang:   s.lang,
		root:   c.cwd,
		pid:    cmd.Process.Pid,
		group:  group,
		log:    c.log.With("lang", s.lang, "server", name),
		exited: make(chan struct{}),
		gone:   make(chan struct{}),
		docs:   map[string]*document{},
		stamps: map[string]stamp{},

		timeout: c.timeout,
		answers: make(chan *jsonrpc2.Response, maxUnread),
	}
	srv.ctx, srv.cancel = context.WithCancelCause(context.Background())
	srv.stderr = newStderrLog(srv.log, srv.misbehave)
	srv.run(cmd, p)
	s.srv = srv
	c.mu.Unlock()
	srv.log.Debug("lsp: started a language server", "pid", srv.pid, "cwd", c.cwd)

	if err := c.initialize(srv); err != nil {
		// Whether the server died by itself is known for sure only once it
		// is reaped: a write to it can fail before its exit is seen.
		var answer *jsonrpc2.Error
		answered := errors.As(err, &answer)
		timedOut := errors.Is(err, context.DeadlineExceeded)
		if !answered && !timedOut && c.closing.Err() == nil {
			srv.settle()
		}
		c.drop(s, srv)
		switch {
		case c.closing.Err() != nil:
			return nil, errClosed
		case errors.Is(context.Cause(srv.ctx), errMisbehaved):
			return nil, context.Cause(srv.ctx)
		case answered:
			return nil, failed("initialize failed: " + answer.Message)
		case timedOut:
			return nil, failed(fmt.Sprintf("no answer to initialize within %v", initTimeout))
		}
		return nil, failed(context.Cause(srv.ctx).Error())
	}
	return srv, nil
}

// startError says why a command could not be started, in the terms of the
// configuration that named it.
func startError(err error, lang, line string) string {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("it is not installed or not on PATH (lsp.servers.%s is %q)", lang, line)
	}
	return err.Error()
}

// initialize sends initialize, waits for its response, and sends
// initialized. It does not depend on the caller's context: a server that
// starts is worth keeping for the next call even when this one is
// cancelled.
func (c *Client) initialize(srv *server) error {
	ctx, cancel := context.WithTimeout(c.closing, initTimeout)
	defer cancel()
	ctx, release := srv.bind(ctx)
	defer release()

	root := uri.File(c.cwd)
	params := &protocol.InitializeParams{
		ProcessID:  int32(os.Getpid()),
		ClientInfo: &protocol.ClientInfo{Name: "mm"},
		RootPath:   c.cwd,
		RootURI:    root,
		WorkspaceFolders: []protocol.WorkspaceFolder{
			{URI: string(root), Name: filepath.Base(c.cwd)},
		},
		Capabilities: protocol.ClientCapabilities{
			Workspace: &protocol.WorkspaceClientCapabilities{
				// mm applies a rename's edits itself, so it asks for them in
				// the reply rather than through workspace/applyEdit, and it
				// can only change the text of existing files.
				ApplyEdit: false,
				WorkspaceEdit: &protocol.WorkspaceClientCapabilitiesWorkspaceEdit{
					DocumentChanges: true,
				},
				DidChangeWatchedFiles: &protocol.DidChangeWatchedFilesWorkspaceClientCapabilities{},
				WorkspaceFolders:      true,
				Configuration:         true,
			},
			TextDocument: &protocol.TextDocumentClientCapabilities{
				Synchronization: &protocol.TextDocumentSyncClientCapabilities{},
				Hover: &protocol.HoverTextDocumentClientCapabilities{
					ContentFormat: []protocol.MarkupKind{protocol.Markdown, protocol.PlainText},
				},
				Definition: &protocol.DefinitionTextDocumentClientCapabilities{},
				References: &protocol.ReferencesTextDocumentClientCapabilities{},
				DocumentSymbol: &protocol.DocumentSymbolClientCapabilities{
					SymbolKind:                        &protocol.SymbolKindCapabilities{ValueSet: allSymbolKinds()},
					HierarchicalDocumentSymbolSupport: true,
				},
				Rename: &protocol.RenameClientCapabilities{},
			},
		},
	}
	res, err := srv.rpc.Initialize(ctx, params)
	if err != nil {
		return err
	}
	if res != nil {
		srv.caps = res.Capabilities
	}
	return srv.rpc.Initialized(ctx, &protocol.InitializedParams{})
}

// allSymbolKinds lists every symbol kind, which servers otherwise limit to
// the kinds of LSP's first version.
func allSymbolKinds() []protocol.SymbolKind {
	kinds := make([]protocol.SymbolKind, 0, 26)
	for k := protocol.SymbolKindFile; k <= protocol.SymbolKindTypeParameter; k++ {
		kinds = append(kinds, k)
	}
	return kinds
}

// run connects to the started process and starts the goroutines that watch
// it.
func (srv *server) run(cmd *exec.Cmd, p *pipes) {
	std := &stdio{r: p.outR, w: p.inW, wait: srv.timeout, stalled: func() {
		srv.misbehave(fmt.Sprintf("it stopped reading its input for %v", srv.timeout))
	}}
	srv.frames = newFrames(std, srv.misbehave)
	srv.conn = jsonrpc2.NewConn(srv.frames)
	srv.conn.Go(context.Background(), srv.handler())
	// The dispatcher logs through zap; mm logs through slog, and what the
	// dispatcher would say is covered by this package's own debug logs.
	srv.rpc = protocol.ServerDispatcher(srv.conn, zap.NewNop())

	// The answerer writes the answers to the server's requests, so that the
	// connection reads on while the server reads them. It writes to the
	// stream, which takes its turn with the connection's writes, rather than
	// through jsonrpc2's replier, which would keep each request until its
	// answer is written. Its writes end with the server: they fail once the
	// server is cancelled or its input closed, and wait srv.timeout at most.
	answerDone := make(chan struct{})
	go func() {
		defer close(answerDone)
		for {
			select {
			case resp := <-srv.answers:
				if _, err := srv.frames.Write(srv.ctx, resp); err != nil {
					srv.log.Debug("lsp: an answer to the server was not written", "err", err)
				}
			case <-srv.conn.Done():
				return
			}
		}
	}()

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		procs.CopyPipe(p.errR, srv.stderr)
	}()

	// A server whose connection broke (it closed its output, or wrote
	// something that is not JSON-RPC) cannot answer anymore: it is killed,
	// and the next call starts another.
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		<-srv.conn.Done()
		// A server that exits closes its output first; its exit status,
		// given a moment to arrive, says more than the closed connection.
		t := time.NewTimer(pipeGrace)
		defer t.Stop()
		select {
		case <-srv.exited:
			return
		case <-t.C:
		}
		why := "closed its connection"
		if err := srv.conn.Err(); err != nil {
			why = "broke its connection: " + err.Error()
		}
		srv.cancel(errors.New(oneLine(srv.name + " " + why)))
		srv.kill()
	}()

	go func() {
		err := cmd.Wait()
		procs.Done(cmd)
		// Helpers the server left behind are of no use without it.
		srv.group.Kill()
		srv.reaped.Store(true)
		srv.stderr.close()
		procs.FinishPipe(p.errR, srv.stderr, readDone, time.Now().Add(pipeGrace))
		srv.stderr.flush()
		srv.cancel(srv.exitError(err))
		close(srv.exited)
		srv.log.Debug("lsp: language server exited", "pid", srv.pid, "status", err)

		// The connection ends by itself when the last holder of the output
		// pipe is gone; a process that left the group may hold it longer.
		t := time.NewTimer(pipeGrace)
		select {
		case <-srv.conn.Done():
		case <-t.C:
		}
		t.Stop()
		_ = srv.conn.Close()
		<-srv.conn.Done()
		<-watchDone
		<-answerDone
		close(srv.gone)
	}()
}

// misbehave stops a server that broke one of the bounds on what it sends
// or how it reads: the reason becomes its cause, which the call in flight
// returns, and a warning in the log. Any goroutine may call it.
func (srv *server) misbehave(why string) {
	err := &misbehavior{lang: srv.lang, why: why}
	srv.cancel(err)
	if context.Cause(srv.ctx) == error(err) {
		srv.log.Warn(err.Error())
	}
	srv.kill()
}

// exitError describes the end of the server's process for the model, with
// the last thing it wrote to stderr, which is usually why.
func (srv *server) exitError(err error) error {
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	msg := fmt.Sprintf("%s exited (%s)", srv.name, status)
	if last := srv.stderr.last(); last != "" {
		msg += "; its last stderr line: " + last
	}
	return errors.New(oneLine(msg))
}

// bind returns a context that is also cancelled when the server dies, with
// the server's cause, since jsonrpc2's Call would otherwise wait for a dead
// server's response until its own context ends.
func (srv *server) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(srv.ctx, func() { cancel(context.Cause(srv.ctx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// settle waits a moment for the server's exit to be seen, after a failed
// write or a cancelled call hinted that it died, so that the error the
// model reads is the server's exit status rather than a broken pipe.
func (srv *server) settle() {
	t := time.NewTimer(pipeGrace)
	defer t.Stop()
	select {
	case <-srv.exited:
	case <-t.C:
	}
}

// kill kills the server's process group, unless the server was already
// reaped (its leftovers were killed then).
func (srv *server) kill() {
	if !srv.reaped.Load() {
		srv.group.Kill()
	}
}

// stop shuts the server down politely, then by force, and returns once its
// process and its group are gone and its goroutines have ended.
func (srv *server) stop() {
	polite := make(chan struct{})
	go func() {
		defer close(polite)
		if srv.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		ctx, release := srv.bind(ctx)
		defer release()
		if err := srv.rpc.Shutdown(ctx); err != nil {
			srv.log.Debug("lsp: shutdown failed", "err", err)
		}
		// exit is sent even after a failed shutdown: the server then exits
		// with status 1, which is still an exit.
		_ = srv.rpc.Exit(ctx)
	}()
	// The polite goroutine can be stuck writing to a server that stopped
	// reading, so the wait for it is bounded too.
	t := time.NewTimer(shutdownTimeout)
	select {
	case <-polite:
		t.Reset(exitGrace)
		select {
		case <-srv.exited:
		case <-t.C:
		}
	case <-srv.exited:
	case <-t.C:
	}
	t.Stop()
	srv.kill()
	<-srv.gone
	<-polite
	// Killed members of the group take a moment to die.
	srv.group.WaitGone(time.Now().Add(time.Second))
	srv.group.Close()
}
