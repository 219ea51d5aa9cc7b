package mcpclient

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Server is one MCP server to connect to: Command (stdio) or URL (streamable HTTP).
type Server struct {
	Name    string
	Command string
	Args    []string
	Env     map[string]string
	URL     string
	Headers map[string]string
	// Ask says every call of its tools asks the user's permission (config permissions: ask).
	Ask bool
	// Unsupported, when set, says why the server cannot be used: it fails
	// to start with that reason, like a server whose command is missing.
	Unsupported string
	// Timeout bounds one call of its tools (DefaultTimeout when 0); a
	// call not answered by then is cancelled and fails. TimeoutKey names
	// the setting it came from in that failure ("mcp.timeout" when "").
	Timeout    time.Duration
	TimeoutKey string
	// MaxTools is how many of its tools are offered at most
	// (DefaultMaxTools when 0): every tool goes into every model request.
	MaxTools int
}

// Defaults of a Server's bounds.
const (
	DefaultTimeout  = 10 * time.Minute
	DefaultMaxTools = 128
)

// Tool is a tool a server offers, as the model sees it.
type Tool struct {
	Name        string // mcp__<server>__<tool>, with the server and tool names reduced to [A-Za-z0-9_-] (others → _) and the whole cut to 64 characters
	Server      string // the server's name
	Remote      string // the tool's own name on the server
	Description string
	Schema      json.RawMessage // its input schema (an empty object schema when the server gives none)
	ReadOnly    bool            // annotations.readOnlyHint
	Title       string          // annotations.title or the tool's title, "" if none
	Ask         bool            // the server's Ask
}

// Content is one piece of a tool's result: Text, or an image (MIMEType and base64 Data), or a resource (URI, MIMEType, and Text or base64 Blob).
type Content struct {
	Type     string // "text", "image", "resource"
	Text     string
	MIMEType string
	Data     string
	URI      string
	Blob     string
}

// Result is a call's result.
type Result struct {
	Content []Content
	IsError bool // the tool said it failed (CallToolResult.IsError)
}

// connectTimeout bounds a connection attempt, initialize included, and a
// listing of tools: a server that never answers must end as a warning, not
// as a connection that waits forever. It is a variable so that the tests can
// shorten it.
var connectTimeout = 30 * time.Second

// maxNameLen is the longest tool name the model APIs accept.
const maxNameLen = 64

// emptySchema is offered for a tool whose server gives no input schema:
// model APIs want an object schema, and some want its properties too.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// Sessions holds the MCP connections of one ACP session.
type Sessions struct {
	log *slog.Logger
	// confine, when set, confines each stdio server's command
	// (ConnectConfined).
	confine   func(*exec.Cmd) (func(), error)
	onChange  func()
	onWarning func(string)
	// elicitURL claims URL elicitation to the servers (Options.ElicitURL).
	elicitURL bool

	// ctx is cancelled by Close: it stops the connection attempts, the
	// listings and the calls in flight, and tells every server's goroutine
	// to disconnect.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the servers' goroutines, which own everything of their
	// server; Close waits for them.
	wg sync.WaitGroup
	// conns is set by Connect and never changes; the order of the servers
	// decides which tool keeps a name that two tools reduce to.
	conns []*conn

	mu     sync.Mutex
	closed bool
	tools  []Tool           // sorted by Name
	byName map[string]route // the tools of tools, by Name
}

// route says where a tool's calls go.
type route struct {
	c      *conn
	remote string
}

// Connect starts connecting to every server in the background and returns at once. onChange is called (from any goroutine, never while a lock of this package is held) whenever the set of available tools changes (a server listed its tools, a server's tool list changed, a server died); onWarning with one line per problem ("MCP server \"fs\" did not start: exec: \"nope\": executable file not found in $PATH", "MCP server \"fs\" stopped: …").
func Connect(servers []Server, cwd, sessionID string, log *slog.Logger, onChange func(), onWarning func(string)) *Sessions {
	return ConnectConfined(servers, cwd, sessionID, log, onChange, onWarning, nil)
}

// ConnectConfined is Connect with each stdio server's command confined by
// confine (the session's sandbox, package sandbox) before it starts; a
// confine error fails that server, saying why. nil confines nothing.
func ConnectConfined(servers []Server, cwd, sessionID string, log *slog.Logger, onChange func(), onWarning func(string), confine func(*exec.Cmd) (func(), error)) *Sessions {
	return ConnectWith(servers, cwd, sessionID, Options{Log: log, OnChange: onChange, OnWarning: onWarning, Confine: confine})
}

// Options are Connect's, and more.
type Options struct {
	Log       *slog.Logger
	OnChange  func()
	OnWarning func(string)
	Confine   func(*exec.Cmd) (started func(), err error)
	// ElicitURL claims URL elicitation to the servers: the session's
	// client can show a page a server asks its user to open (elicit.go).
	ElicitURL bool
}

// ConnectWith is Connect with every option.
func ConnectWith(servers []Server, cwd, sessionID string, o Options) *Sessions {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.OnChange == nil {
		o.OnChange = func() {}
	}
	if o.OnWarning == nil {
		o.OnWarning = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sessions{
		log:       o.Log,
		onChange:  o.OnChange,
		onWarning: o.OnWarning,
		confine:   o.Confine,
		elicitURL: o.ElicitURL,
		ctx:       ctx,
		cancel:    cancel,
		byName:    map[string]route{},
	}
	for _, srv := range servers {
		// The caller may change its slices and maps once Connect returns;
		// the servers' goroutines read these copies.
		srv.Args = slices.Clone(srv.Args)
		srv.Env = maps.Clone(srv.Env)
		srv.Headers = maps.Clone(srv.Headers)
		s.conns = append(s.conns, &conn{s: s, srv: srv, sanitized: sanitize(srv.Name)})
	}
	for _, c := range s.conns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.run(cwd, sessionID)
		}()
	}
	return s
}

// Tools lists the tools available now, sorted by Name.
func (s *Sessions) Tools() []Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tools)
}

// Call calls a tool by its mcp__ name. Cancelling ctx cancels the call (the SDK sends notifications/cancelled) and returns at once with ctx's error. An unknown tool, or its server gone, is an error written for the model.
func (s *Sessions) Call(ctx context.Context, name string, args map[string]any) (Result, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{}, fmt.Errorf("MCP tool %q cannot be called: the session's MCP servers are disconnected", name)
	}
	r, ok := s.byName[name]
	var cs *mcp.ClientSession
	if ok {
		cs = r.c.cs
	}
	s.mu.Unlock()
	if !ok {
		return Result{}, s.unknown(name)
	}

	// Close cancels the call too: the SDK's Close waits for the calls in
	// flight, and a slow tool must not hold the session's end. So does the
	// time limit, after which the SDK tells the server the call is
	// cancelled.
	srv := r.c.srv
	timeout := cmp.Or(srv.Timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	if args == nil {
		// A nil map would go out as null, which servers reject: the
		// arguments are an object, if an empty one.
		args = map[string]any{}
	}
	if a, ok := ctx.Value(askerKey{}).(Asker); ok && s.elicitURL {
		x := &asking{ask: a, ctx: cctx}
		r.c.askers.push(x)
		defer r.c.askers.pop(x)
	}
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: r.remote, Arguments: args})
	switch {
	case err == nil:
		return convert(res), nil
	case ctx.Err() != nil:
		return Result{}, ctx.Err()
	case s.ctx.Err() != nil:
		return Result{}, fmt.Errorf("MCP tool %q was stopped: the session's MCP servers were disconnected during the call", name)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return Result{}, fmt.Errorf("MCP server %q did not answer the call of %q within %v (%s); the call was cancelled",
			srv.Name, r.remote, timeout, cmp.Or(srv.TimeoutKey, "mcp.timeout"))
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The connection ended under the call: the SDK retires the calls in
		// flight with the reader's error, the end of the server's output.
		if r.c.srv.Command == "" {
			return Result{}, fmt.Errorf("MCP server %q dropped the connection during the call of %q", r.c.srv.Name, r.remote)
		}
		return Result{}, fmt.Errorf("MCP server %q stopped during the call of %q", r.c.srv.Name, r.remote)
	default:
		return Result{}, fmt.Errorf("MCP server %q could not run %q: %v", r.c.srv.Name, r.remote, err)
	}
}

// unknown explains to the model why there is no tool by that name: its
// server may have stopped, may still be starting, or may not offer it.
func (s *Sessions) unknown(name string) error {
	for _, c := range s.conns {
		prefix := "mcp__" + c.sanitized + "__"
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		s.mu.Lock()
		state := c.state
		s.mu.Unlock()
		switch state {
		case running:
			return fmt.Errorf("MCP server %q offers no tool %q", c.srv.Name, name)
		case starting:
			return fmt.Errorf("MCP server %q is still starting; its tool %q is not available yet", c.srv.Name, name)
		case stopped:
			return fmt.Errorf("MCP server %q is not running (it stopped or did not start), so its tool %q cannot be called", c.srv.Name, name)
		}
	}
	return fmt.Errorf("there is no MCP tool %q", name)
}

// Close disconnects every server, kills what they left (their process groups), and returns once no process or goroutine of theirs is left. Calls after Close fail.
func (s *Sessions) Close() {
	s.mu.Lock()
	s.closed = true
	s.tools = nil
	s.byName = map[string]route{}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// setTools replaces the tools of c (nil when its server is gone) and tells
// onChange when the tools on offer changed. The callback runs after the
// lock is released, so that it may call Tools.
func (s *Sessions) setTools(c *conn, state connState, cs *mcp.ClientSession, tools []Tool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	c.state, c.cs, c.tools = state, cs, tools
	old := s.tools
	s.rebuild()
	changed := !slices.EqualFunc(old, s.tools, func(a, b Tool) bool { return reflect.DeepEqual(a, b) })
	s.mu.Unlock()
	if changed {
		s.onChange()
	}
}

// rebuild computes the tools on offer from every server's. Two tools may
// reduce to the same name (servers with the same name, names that differ
// only in characters that become "_", names cut at 64 characters): the
// first server in the configuration, then the first tool in its list,
// keeps the name, so that the choice does not depend on which server
// answered first. s.mu is held.
func (s *Sessions) rebuild() {
	s.tools = s.tools[:0:0]
	s.byName = map[string]route{}
	for _, c := range s.conns {
		for _, t := range c.tools {
			if prev, dup := s.byName[t.Name]; dup {
				s.log.Warn("MCP tool name taken; the tool is not offered",
					"name", t.Name, "server", c.srv.Name, "tool", t.Remote,
					"taken_by_server", prev.c.srv.Name, "taken_by_tool", prev.remote)
				continue
			}
			s.byName[t.Name] = route{c: c, remote: t.Remote}
			s.tools = append(s.tools, t)
		}
	}
	slices.SortFunc(s.tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
}

// warn reports a problem unless the session is closing: what happens to
// servers while Close stops them is no news to anyone.
func (s *Sessions) warn(msg string) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.onWarning(msg)
	}
}

// toolName is the name the model sees: mcp__<server>__<tool>, reduced to
// the characters every model API accepts in a tool name, and cut to the
// length they accept.
func toolName(server, tool string) string {
	name := "mcp__" + sanitize(server) + "__" + sanitize(tool)
	if len(name) > maxNameLen {
		name = name[:maxNameLen] // only ASCII is left, so bytes are characters
	}
	return name
}

// sanitize replaces every character but [A-Za-z0-9_-] with "_".
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// toTool describes a tool of server srv as the model sees it, or says why
// the model cannot be offered it (offer.go).
func toTool(srv Server, t *mcp.Tool) (Tool, string) {
	schema, why := checkSchema(t.InputSchema)
	out := Tool{
		Name:        toolName(srv.Name, t.Name),
		Server:      srv.Name,
		Remote:      t.Name,
		Description: cutDescription(t.Description),
		Schema:      schema,
		Title:       t.Title,
		Ask:         srv.Ask,
	}
	// The specification gives the tool's own title precedence over the
	// annotation's, which older servers use instead.
	if a := t.Annotations; a != nil {
		out.ReadOnly = a.ReadOnlyHint
		if out.Title == "" {
			out.Title = a.Title
		}
	}
	return out, why
}

// convert turns the SDK's result into the package's. Content that has no
// place in Content (audio, links, and kinds yet to come) becomes text that
// tells the model what it was, so that nothing is dropped silently.
func convert(res *mcp.CallToolResult) Result {
	out := Result{IsError: res.IsError, Content: make([]Content, 0, len(res.Content))}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out.Content = append(out.Content, Content{Type: "text", Text: c.Text})
		case *mcp.ImageContent:
			out.Content = append(out.Content, Content{Type: "image", MIMEType: c.MIMEType, Data: base64.StdEncoding.EncodeToString(c.Data)})
		case *mcp.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			r := Content{Type: "resource", URI: c.Resource.URI, MIMEType: c.Resource.MIMEType, Text: c.Resource.Text}
			if c.Resource.Blob != nil {
				r.Blob = base64.StdEncoding.EncodeToString(c.Resource.Blob)
			}
			out.Content = append(out.Content, r)
		case *mcp.AudioContent:
			out.Content = append(out.Content, Content{Type: "text", Text: fmt.Sprintf("[audio content (%s, %d bytes) that cannot be shown]", c.MIMEType, len(c.Data))})
		case *mcp.ResourceLink:
			text := "[resource link: " + c.URI
			if c.Name != "" {
				text += " (" + c.Name + ")"
			}
			if c.MIMEType != "" {
				text += ", " + c.MIMEType
			}
			if c.Description != "" {
				text += ": " + c.Description
			}
			out.Content = append(out.Content, Content{Type: "text", Text: text + "]"})
		default:
			if b, err := c.MarshalJSON(); err == nil {
				out.Content = append(out.Content, Content{Type: "text", Text: string(b)})
			}
		}
	}
	// A tool with an output schema may answer with structured content
	// only; the model still needs to read it.
	if len(out.Content) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out.Content = append(out.Content, Content{Type: "text", Text: string(b)})
		}
	}
	return out
}

// implementation names mm to the servers, with the version it was built as.
func implementation() *mcp.Implementation {
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	return &mcp.Implementation{Name: "mm", Version: version}
}
