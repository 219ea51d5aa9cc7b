// Package agents is mm as an ACP client: it starts another ACP agent,
// gives it a session in a cwd and asks it questions, for the ask_agent tool
// and for `mm --ask`. It speaks ACP through one jsonrpc.Conn over the
// agent's stdin and stdout, with acp-go-sdk's types.
//
// The asked agent's requests to its client — permission requests and
// elicitation forms — go to a Relay: in a session, the user of the agent
// that asks decides; `mm --ask` refuses them.
//
// An asked agent may write anything (conn.go): the Conn reads each line
// whole up to maxLine, drops what is not JSON and answers what breaks
// JSON-RPC's rules; a longer line is left out, saying so (an update leaves
// a note in the answer, a response fails the request it answers, a
// request is refused); the updates are delivered in the order read, each
// before what follows it; at most maxRequests of the agent's requests are
// answered at once, the others refused; the answer kept is bounded too
// (maxAnswer). A question that fails says why in one line.
//
// Concurrency: an Agent serves one question at a time (Ask holds it); a
// Pool is safe for concurrent use. The Conn's read loop delivers the
// updates to the client; the agent's requests are answered from goroutines
// of their own, as a person may take a while.
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

	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/jsonrpc"
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
	rpc     *jsonrpc.Conn
	stdin   io.Closer
	client  *client
	session acp.SessionId
	log     *slog.Logger
	// ctx ends with the connection: the agent's requests still being
	// answered are given up then.
	ctx     context.Context
	read    chan struct{} // closed once the read loop has ended
	dropped int           // lines dropped or refused (the read loop's)
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
	a := &Agent{name: cfg.Name, group: group, stdin: stdin, client: &client{}, log: log.With("agent", cfg.Name), done: make(chan struct{})}
	go func() {
		a.exitErr = cmd.Wait()
		procs.Done(cmd)
		close(a.done)
	}()
	a.connect(stdout, stdin)
	if err := a.open(ctx, cwd); err != nil {
		a.Close()
		return nil, fmt.Errorf("agent %q: %v", cfg.Name, err)
	}
	return a, nil
}

func (a *Agent) open(ctx context.Context, cwd string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := jsonrpc.CallFor[acp.InitializeResponse](ctx, a.rpc, acp.AgentMethodInitialize, acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientInfo:         &acp.Implementation{Name: "mm", Version: "ask"},
		ClientCapabilities: acp.ClientCapabilities{Elicitation: &acp.ElicitationCapabilities{Form: &acp.ElicitationFormCapabilities{}}},
	}, ""); err != nil {
		return fmt.Errorf("initialize: %s", a.failure(err))
	}
	s, err := jsonrpc.CallFor[acp.NewSessionResponse](ctx, a.rpc, acp.AgentMethodSessionNew, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}}, "")
	if err != nil {
		return fmt.Errorf("session/new: %s", a.failure(err))
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
	case <-a.rpc.Done():
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
		r, err := jsonrpc.CallFor[acp.PromptResponse](context.Background(), a.rpc, acp.AgentMethodSessionPrompt,
			acp.PromptRequest{SessionId: a.session, Prompt: []acp.ContentBlock{acp.TextBlock(question)}}, string(a.session))
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
	go func() {
		_ = a.rpc.Notify(acp.AgentMethodSessionCancel, acp.CancelNotification{SessionId: a.session}, string(a.session))
	}()
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
	case <-a.rpc.Done():
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
	// Its output is closed with it: the read loop ends, and the requests
	// it was answering are given up.
	select {
	case <-a.read:
	case <-time.After(5 * time.Second):
	}
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

// RequestPermission relays a permission request; with no one to ask, it
// is cancelled.
func (c *client) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	r := c.relayNow()
	if r == nil {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return r.RequestPermission(ctx, p)
}

// Elicit relays a form (acp-go-sdk's unstable types); with no one to ask,
// it fails.
func (c *client) Elicit(ctx context.Context, p acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	r := c.relayNow()
	if r == nil {
		return acp.UnstableCreateElicitationResponse{}, jsonrpc.Internal("no one can be asked", nil)
	}
	return r.Elicit(ctx, p)
}

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
