// Package agents is mm as an ACP client: it starts another ACP agent,
// gives it a session in a cwd and asks it questions, for the ask_agent tool
// and for `mm --ask`. It speaks ACP with acp-go-sdk's client side.
//
// The asked agent's requests to its client — permission requests and
// elicitation forms — go to a Relay: in a session, the user of the agent
// that asks decides; `mm --ask` refuses them.
//
// An asked agent may write anything: its output reaches the SDK through
// the inbound (inbound.go), which reads each line whole within the SDK's
// bound, delivers the updates itself, and refuses what the SDK would choke
// on; the answer kept is bounded too (maxAnswer). A question that fails
// says why in one line.
//
// Concurrency: an Agent serves one question at a time (Ask holds it); a
// Pool is safe for concurrent use. The inbound's reading runs on the SDK's
// reader goroutine and delivers updates to the client from there.
package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/gate"
	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/internal/rpcerr"
)

// Config is an agent mm can ask: the command that starts it on ACP.
type Config struct {
	Name    string
	Command string
	Args    []string
	Env     map[string]string
	// Confine, when set, confines the agent's command before it starts
	// (the asking session's sandbox, package sandbox): an asked agent is
	// another program the session starts, confined as its bash is.
	Confine func(*exec.Cmd) (started func(), err error)
}

// Relay answers the asked agent's requests to its client.
type Relay interface {
	RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
	Elicit(ctx context.Context, p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error)
}

// cancelGrace is how long an asked agent has to answer a cancelled prompt
// before it is killed.
const cancelGrace = time.Second

// maxAnswer bounds the text kept of one answer; the rest is counted.
const maxAnswer = 1 << 20

// Agent is one asked agent: its process, its connection, and the session
// mm asks it in.
type Agent struct {
	name    string
	group   *procs.Group
	conn    *acp.ClientSideConnection
	stdin   io.Closer
	client  *client
	session acp.SessionId
	done    chan struct{} // closed once the process is reaped
	exitErr error         // how it ended, once done is closed
	mu      sync.Mutex    // one question at a time
}

// Start starts the agent in cwd, initialises it (announcing elicitation
// forms) and opens a session there. Its requests to its client are refused
// until a question gives them a Relay. sessionID marks its processes as the
// asking session's, so that they die with it.
func Start(ctx context.Context, cfg Config, cwd, sessionID string, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), procs.SessionEnv(sessionID))
	for k, v := range cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	started := func() {}
	if cfg.Confine != nil {
		var err error
		if started, err = cfg.Confine(cmd); err != nil {
			return nil, err
		}
	}
	defer started()
	group := procs.NewGroup(cmd)
	stderr := &logWriter{log: log, prefix: "[ask " + cfg.Name + "] "}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := group.Start(); err != nil {
		return nil, fmt.Errorf("agent %q did not start: %v", cfg.Name, err)
	}
	a := &Agent{name: cfg.Name, group: group, stdin: stdin, client: &client{}, done: make(chan struct{})}
	go func() {
		a.exitErr = cmd.Wait()
		procs.Done(cmd)
		close(a.done)
	}()
	// The agent's output reaches the SDK through the inbound (inbound.go),
	// which bounds what the SDK cannot take. The SDK's SetLogger is not
	// synchronised with its reader: the reader waits until the logger is
	// set.
	alog := log.With("agent", cfg.Name)
	w := newWire(stdin)
	in := gate.New(newInbound(stdout, a.client, w, alog))
	a.conn = acp.NewClientSideConnection(a.client, w, in)
	// The SDK reports a closed connection at info level: here that is the
	// normal end of every asked agent.
	a.conn.SetLogger(slog.New(warnOnly{alog.Handler()}).With("lib", "acp-client"))
	in.Open()
	if err := a.open(ctx, cwd); err != nil {
		a.Close()
		return nil, fmt.Errorf("agent %q: %v", cfg.Name, err)
	}
	return a, nil
}

func (a *Agent) open(ctx context.Context, cwd string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.conn.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientInfo:         &acp.Implementation{Name: "mm", Version: "ask"},
		ClientCapabilities: acp.ClientCapabilities{Elicitation: &acp.ElicitationCapabilities{Form: &acp.ElicitationFormCapabilities{}}},
	}); err != nil {
		return fmt.Errorf("initialize: %v", err)
	}
	s, err := a.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		return fmt.Errorf("session/new: %v", err)
	}
	a.session = s.SessionId
	return nil
}

// ErrGone says the agent's process or its connection ended; a Pool starts
// it again.
var ErrGone = errors.New("the agent is gone")

// Ask sends question as a prompt and returns the text the agent streamed
// in answer; the agent's requests meanwhile go to relay (nil refuses
// them). When ctx ends, the agent gets session/cancel and one second to
// answer cancelled; then it is killed.
func (a *Agent) Ask(ctx context.Context, question string, relay Relay) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
		return "", ErrGone
	case <-a.conn.Done():
		// Its connection ended with an earlier question (an output that
		// closed): a fresh one is started.
		a.kill()
		return "", ErrGone
	default:
	}
	a.client.start(a.session, relay)
	defer a.client.start(a.session, nil)
	type answer struct {
		r   acp.PromptResponse
		err error
	}
	ch := make(chan answer, 1)
	// The prompt's own context is not ctx: a cancel goes as
	// session/cancel, which lets the agent end its turn cleanly.
	go func() {
		r, err := a.conn.Prompt(context.Background(), acp.PromptRequest{SessionId: a.session, Prompt: []acp.ContentBlock{acp.TextBlock(question)}})
		ch <- answer{r, err}
	}()
	select {
	case res := <-ch:
		text := a.client.text()
		if res.err != nil {
			return text, fmt.Errorf("agent %q failed: %s", a.name, a.failure(res.err))
		}
		if res.r.StopReason == acp.StopReasonCancelled {
			return text, context.Canceled
		}
		return text, nil
	case <-ctx.Done():
	}
	// Sent aside: an agent that reads nothing would hold the write, and
	// the kill after the grace ends it.
	go func() { _ = a.conn.Cancel(context.Background(), acp.CancelNotification{SessionId: a.session}) }()
	select {
	case <-ch:
	case <-time.After(cancelGrace):
		a.kill()
		<-ch // the connection closes with the process
	}
	return a.client.text(), ctx.Err()
}

// failure says why a question failed, in one line for the model and the
// user: the agent's own error, or, when the connection ended, how the
// process ended.
func (a *Agent) failure(err error) string {
	select {
	case <-a.conn.Done():
		select {
		case <-a.done:
		case <-time.After(cancelGrace):
		}
		select {
		case <-a.done:
			if a.exitErr != nil {
				return "it exited before answering (" + a.exitErr.Error() + ")"
			}
			return "it exited before answering"
		default:
			return "it closed its output before answering"
		}
	default:
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		msg := re.Message
		if d, ok := re.Data.(map[string]any); ok {
			if e, ok := d["error"].(string); ok && e != "" && e != msg {
				if msg == "" || msg == "Internal error" {
					msg = e
				} else {
					msg += ": " + e
				}
			}
		}
		return oneLine(msg)
	}
	return oneLine(err.Error())
}

// Close ends the agent: its stdin is closed, it has a moment to exit, then
// its group is killed.
func (a *Agent) Close() {
	_ = a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(cancelGrace):
	}
	a.kill()
}

func (a *Agent) kill() {
	a.group.Kill()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
	}
	a.group.WaitGone(time.Now().Add(time.Second))
	a.group.Close()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// client is the ACP client side mm offers an asked agent: it collects the
// answer's text (maxAnswer bytes of it, the rest counted) and relays what
// must be asked of a person.
type client struct {
	relay   Relay
	mu      sync.Mutex
	session acp.SessionId
	answer  strings.Builder
	left    int // bytes of the answer past maxAnswer
}

var _ acp.Client = (*client)(nil)

func (c *client) start(s acp.SessionId, relay Relay) {
	c.mu.Lock()
	c.session, c.relay = s, relay
	if relay != nil {
		c.answer.Reset()
		c.left = 0
	}
	c.mu.Unlock()
}

func (c *client) relayNow() Relay {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.relay
}

func (c *client) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left > 0 {
		return c.answer.String() + fmt.Sprintf("\n[mm: the answer went on for %d more bytes, left out]", c.left)
	}
	return c.answer.String()
}

// chunk adds a piece of the agent's message in session s to the answer.
func (c *client) chunk(s acp.SessionId, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == c.session {
		c.add(text)
	}
}

// note adds mm's note to the answer.
func (c *client) note(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(text)
}

// add keeps text within maxAnswer. c.mu is held.
func (c *client) add(text string) {
	if room := maxAnswer - c.answer.Len(); c.left > 0 || len(text) > room {
		// Whole characters only: cut at a rune's start.
		cut := max(room, 0)
		for cut > 0 && cut < len(text) && !utf8.RuneStart(text[cut]) {
			cut--
		}
		c.answer.WriteString(text[:cut])
		c.left += len(text) - cut
		return
	}
	c.answer.WriteString(text)
}

// SessionUpdate is never called: the inbound delivers the updates
// (chunk), as the SDK's queue of notifications would close the connection
// in a burst.
func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if u := n.Update.AgentMessageChunk; u != nil && u.Content.Text != nil {
		c.chunk(n.SessionId, u.Content.Text.Text)
	}
	return nil
}

func (c *client) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	r := c.relayNow()
	if r == nil {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return r.RequestPermission(ctx, p)
}

// UnstableCreateElicitation relays a form; acp-go-sdk gives it to a client
// through its unstable types.
func (c *client) UnstableCreateElicitation(ctx context.Context, p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	r := c.relayNow()
	if r == nil {
		return acp.UnstableCreateElicitationResponse{}, rpcerr.Internal("no one can be asked", nil)
	}
	return r.Elicit(ctx, p)
}

// mm offers no file system or terminal to an asked agent: it works in its
// own cwd with its own tools.

func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// warnOnly passes on warnings and errors only.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }

func (w warnOnly) WithGroup(g string) slog.Handler { return warnOnly{w.Handler.WithGroup(g)} }

// logWriter logs what an asked agent writes on its stderr, a line at a
// time, at debug level.
type logWriter struct {
	log    *slog.Logger
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.log.Debug(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
