package lsp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.lsp.dev/jsonrpc2"
)

// Config is what a Client starts and how long it waits.
type Config struct {
	Servers Servers
	// Timeout bounds each call (lsp.timeout), DefaultTimeout when 0: a
	// server that has not answered by then has the call end with an error.
	// It also bounds each write to a server: one that reads nothing of it
	// for that long has stopped reading, and is stopped.
	Timeout time.Duration
	// Confine, when set, confines each server's command before it starts
	// (the session's sandbox, package sandbox).
	Confine func(*exec.Cmd) (started func(), err error)
}

// DefaultTimeout is lsp.timeout's default.
const DefaultTimeout = 30 * time.Second

// Servers maps a language id ("go", "python", "typescript", "rust", …) to
// the command line that starts its server (split on spaces; a leading ~
// expanded).
type Servers map[string]string

// languages maps a file extension to the language id that names its server
// in Servers. JavaScript goes to the TypeScript server, which serves both.
var languages = map[string]string{
	".go":    "go",
	".py":    "python",
	".pyi":   "python",
	".ts":    "typescript",
	".tsx":   "typescript",
	".mts":   "typescript",
	".cts":   "typescript",
	".js":    "typescript",
	".jsx":   "typescript",
	".mjs":   "typescript",
	".cjs":   "typescript",
	".rs":    "rust",
	".c":     "c",
	".h":     "c",
	".cpp":   "cpp",
	".cc":    "cpp",
	".cxx":   "cpp",
	".hpp":   "cpp",
	".hh":    "cpp",
	".hxx":   "cpp",
	".java":  "java",
	".rb":    "ruby",
	".cs":    "csharp",
	".kt":    "kotlin",
	".kts":   "kotlin",
	".swift": "swift",
	".php":   "php",
	".lua":   "lua",
	".zig":   "zig",
	".scala": "scala",
	".ex":    "elixir",
	".exs":   "elixir",
	".hs":    "haskell",
	".dart":  "dart",
	".ml":    "ocaml",
	".mli":   "ocaml",
}

// Language returns the language id of a file from its extension (.go → go,
// .py → python, .ts/.tsx/.js/.jsx → typescript, .rs → rust, .c/.h → c,
// .cpp/.cc/.hpp → cpp, .java → java, .rb → ruby, and a few more), "" when
// unknown.
func Language(path string) string {
	return languages[strings.ToLower(filepath.Ext(path))]
}

// languageID is the identifier didOpen announces, which is finer than the
// server's language: the TypeScript server wants to know that a file is
// JavaScript, or holds JSX.
func languageID(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".tsx":
		return "typescriptreact"
	case ".js", ".mjs", ".cjs":
		return "javascript"
	case ".jsx":
		return "javascriptreact"
	}
	return Language(path)
}

// Request is one lsp tool call. Line and Column count from 1 (as the model
// reads files); Column counts characters (runes) in the line, and is
// converted to LSP's UTF-16 positions here.
type Request struct {
	Action  string // definition, references, hover, symbols, rename
	Path    string // absolute
	Line    int
	Column  int
	NewName string // rename
}

// Edit is a whole-file change that a rename makes: the file's current text
// and its text after the rename.
type Edit struct {
	Path    string
	OldText string
	NewText string
}

// Result is what a call found.
type Result struct {
	// Text is for the model: locations as "path:line:column: text" one per
	// line, hover as Markdown or plain text, symbols as an indented outline
	// with line numbers, "no definition found …" and the like when empty.
	Text string
	// Edits is set by rename only: every file it changes, sorted by path;
	// the caller applies them.
	Edits []Edit
}

// errClosed is what calls get once Close has begun.
var errClosed = errors.New("the lsp client is closed")

// Client is one session's language servers: started on first use, one per
// language, all rooted at the session's cwd. Safe for concurrent use.
type Client struct {
	servers   Servers
	timeout   time.Duration
	cwd       string
	sessionID string
	log       *slog.Logger
	confine   func(*exec.Cmd) (func(), error) // Config.Confine

	// closing is cancelled by Close, which stops every call in flight and
	// every server start; stop is its cancel function.
	closing context.Context
	stop    context.CancelFunc

	mu     sync.Mutex
	closed bool
	slots  map[string]*slot // by language
	calls  sync.WaitGroup   // the goroutines of Do, added to under mu while !closed
	done   chan struct{}    // closed when Close has finished
}

// slot is one language's place in a Client: the server that serves it, if
// one was started, and the turn that calls for it take.
type slot struct {
	lang string
	// turn holds a token while a call uses the slot; only the holder may
	// start, restart or talk to the server, and touch its documents.
	turn chan struct{}
	// srv is the current server, nil before the first start and after a
	// failed one. It is written by the turn's holder with Client.mu held,
	// so that Close, which does not take turns, reads it under Client.mu.
	srv *server
}

// NewClient returns a Client that starts the servers named in cfg, in
// cwd, marked with sessionID, and logs to log (a server's stderr at debug
// level, a server stopped for misbehaving as a warning). A nil log
// discards.
func NewClient(cfg Config, cwd, sessionID string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		servers:   cfg.Servers,
		timeout:   cfg.Timeout,
		cwd:       cwd,
		sessionID: sessionID,
		log:       log,
		confine:   cfg.Confine,
		closing:   ctx,
		stop:      cancel,
		slots:     map[string]*slot{},
		done:      make(chan struct{}),
	}
}

// outcome is what a call's goroutine hands back to Do.
type outcome struct {
	res Result
	err error
}

// Do performs a request, starting the language's server if needed. Errors
// are written for the model to read, on one line. A cancelled ctx sends
// $/cancelRequest for the request in flight and returns ctx.Err(); so does
// the end of the call's time (Config.Timeout), which returns an error that
// names lsp.timeout.
func (c *Client) Do(ctx context.Context, r Request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if err := check(r); err != nil {
		return Result{}, err
	}
	lang := Language(r.Path)
	if lang == "" {
		return Result{}, fmt.Errorf("the lsp tool does not know the language of %s files", describeExt(r.Path))
	}
	if strings.TrimSpace(c.servers[lang]) == "" {
		return Result{}, fmt.Errorf("no language server is configured for %s files; configure lsp.servers.%s", describeExt(r.Path), lang)
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Result{}, errClosed
	}
	s := c.slots[lang]
	if s == nil {
		s = &slot{lang: lang, turn: make(chan struct{}, 1)}
		c.slots[lang] = s
	}
	c.calls.Add(1)
	c.mu.Unlock()

	caller := ctx
	late := fmt.Errorf("lsp: the %s server did not answer within %v (lsp.timeout)", lang, c.timeout)
	ctx, cancel := context.WithTimeoutCause(caller, c.timeout, late)
	defer cancel()
	// ended is why a call that ended with ctx ended: the caller's reason,
	// or the timeout.
	ended := func() error {
		if err := caller.Err(); err != nil {
			return err
		}
		return context.Cause(ctx)
	}

	// The work runs apart from the caller so that a cancelled ctx returns at
	// once even when the server is stuck (it stopped reading its input, say);
	// the goroutine then cancels the request and lets the next call in, and
	// Close waits for it.
	out := make(chan outcome, 1)
	go func() {
		defer c.calls.Done()
		res, err := c.run(ctx, s, r)
		out <- outcome{res, err}
	}()
	select {
	case o := <-out:
		if o.err != nil && ctx.Err() != nil && !errors.Is(o.err, errMisbehaved) {
			return Result{}, ended()
		}
		return o.res, o.err
	case <-ctx.Done():
		return Result{}, ended()
	}
}

// check validates a request before any server is involved.
func check(r Request) error {
	switch r.Action {
	case "definition", "references", "hover", "rename":
		if r.Line < 1 || r.Column < 1 {
			return fmt.Errorf("line and column count from 1; got line %d, column %d", r.Line, r.Column)
		}
	case "symbols":
	default:
		return fmt.Errorf("unknown lsp action %q; use definition, references, hover, symbols or rename", r.Action)
	}
	if !filepath.IsAbs(r.Path) {
		return fmt.Errorf("the path must be absolute; got %q", r.Path)
	}
	if r.Action == "rename" && strings.TrimSpace(r.NewName) == "" {
		return errors.New("rename needs new_name")
	}
	return nil
}

// describeExt names a file's kind for messages: ".py", or the file's name
// when it has no extension.
func describeExt(path string) string {
	if ext := filepath.Ext(path); ext != "" {
		return ext
	}
	return filepath.Base(path)
}

// run takes the slot's turn, makes sure its server runs, and performs the
// request.
func (c *Client) run(ctx context.Context, s *slot, r Request) (Result, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-c.closing.Done():
		return Result{}, errClosed
	}
	defer func() { <-s.turn }()

	srv, started, err := c.ensure(s)
	if err != nil {
		return Result{}, err
	}
	res, err := c.attempt(ctx, srv, r)
	if err != nil && !started && srv.ctx.Err() != nil && ctx.Err() == nil && c.closing.Err() == nil &&
		!errors.Is(context.Cause(srv.ctx), errMisbehaved) {
		// The server was found dead during the call, having been started by
		// an earlier one: it most likely died between calls, unseen until a
		// write failed. It is restarted, once, and asked again. A server that
		// died of this very request dies again and the call fails; one that
		// was stopped for misbehaving is not asked again.
		if srv, _, err = c.ensure(s); err != nil {
			return Result{}, err
		}
		res, err = c.attempt(ctx, srv, r)
	}
	return res, err
}

// attempt performs the request on srv and phrases its failure for the
// model.
func (c *Client) attempt(ctx context.Context, srv *server, r Request) (Result, error) {
	// A call stops when its caller gives up, when the Client closes, or when
	// the server dies: jsonrpc2's Call waits for a response or its context,
	// and a dead server sends no response.
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	unhook := context.AfterFunc(c.closing, cancel)
	defer unhook()
	work, release := srv.bind(work)
	defer release()

	res, err := c.perform(work, srv, r)
	if err == nil {
		return res, nil
	}
	var answer *jsonrpc2.Error
	switch {
	case ctx.Err() != nil:
		return Result{}, ctx.Err()
	case c.closing.Err() != nil:
		return Result{}, errClosed
	case errors.As(err, &answer):
		return Result{}, fmt.Errorf("%s: %s", srv.name, oneLine(answer.Message))
	}
	// A write to a server that just died fails before its exit is seen; the
	// exit status says more than the broken pipe.
	if srv.ctx.Err() == nil && (errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed)) {
		srv.settle()
	}
	if srv.ctx.Err() != nil {
		return Result{}, context.Cause(srv.ctx)
	}
	return Result{}, errors.New(oneLine(err.Error()))
}

// ensure returns the slot's server, starting it if there is none and
// restarting it if it died since the last call; started says it did either.
func (c *Client) ensure(s *slot) (srv *server, started bool, err error) {
	c.mu.Lock()
	srv = s.srv
	c.mu.Unlock()
	if srv != nil && srv.ctx.Err() == nil {
		return srv, false, nil
	}
	if srv != nil {
		c.log.Debug("lsp: restarting a language server that stopped", "lang", s.lang, "server", srv.name, "cause", context.Cause(srv.ctx))
		c.drop(s, srv)
	}
	srv, err = c.start(s)
	return srv, true, err
}

// drop kills srv, waits until it is reaped and empties its slot, unless a
// newer server already took it.
func (c *Client) drop(s *slot, srv *server) {
	srv.kill()
	<-srv.gone
	srv.group.Close()
	c.mu.Lock()
	if s.srv == srv {
		s.srv = nil
	}
	c.mu.Unlock()
}

// Close shuts every started server down (shutdown, exit, then kill its
// process group if it has not exited within 1 s) and returns once none is
// left. Do after Close fails.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.closed = true
	var servers []*server
	for _, s := range c.slots {
		if s.srv != nil {
			servers = append(servers, s.srv)
		}
	}
	c.mu.Unlock()

	// Calls in flight stop first: they would otherwise hold their servers
	// with requests that no one waits for anymore. No server starts after
	// this point, because start checks closed under mu.
	c.stop()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(srv.stop)
	}
	wg.Wait()
	// A call's goroutine ends once its server is gone, since every write to a
	// dead server fails and every wait is bound to the server's life.
	c.calls.Wait()
	close(c.done)
}
