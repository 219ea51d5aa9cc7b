package acptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/jsonrpc"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/logs"
	"github.com/mm-agent/mm/protocol"
)

// Conn is a client connected to an agent: one jsonrpc.Conn, whose calls
// are the methods of acp-go-sdk's ClientSideConnection (methods.go).
type Conn struct {
	rpc *jsonrpc.Conn
	// failed is why the reader stopped where acp-go-sdk's would have
	// (source), once it has.
	failed error

	Client *Client
	// Stdout holds a copy of every byte the agent wrote on its stdout
	// (subprocess) or output pipe (in-process).
	Stdout *SyncBuffer
	// Stderr holds the agent's log.
	Stderr *SyncBuffer

	closeIn func() error
	wait    func() error
	proc    *os.Process
	valve   *valve
}

// Pause stops reading the agent's output, as an editor that is busy does:
// the agent's writes block once the pipe is full. Resume reads again.
func (c *Conn) Pause() { c.valve.set(true) }

// Resume undoes Pause.
func (c *Conn) Resume() { c.valve.set(false) }

// valve is a reader that can be held shut.
type valve struct {
	r      io.Reader
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
}

func newValve(r io.Reader) *valve {
	v := &valve{r: r}
	v.cond = sync.NewCond(&v.mu)
	return v
}

func (v *valve) set(paused bool) {
	v.mu.Lock()
	v.paused = paused
	v.mu.Unlock()
	v.cond.Broadcast()
}

func (v *valve) Read(p []byte) (int, error) {
	v.mu.Lock()
	for v.paused {
		v.cond.Wait()
	}
	v.mu.Unlock()
	return v.r.Read(p)
}

// Process returns the agent's process (nil in-process).
func (c *Conn) Process() *os.Process { return c.proc }

// SyncBuffer is a bytes.Buffer safe for concurrent use.
type SyncBuffer = syncbuf.Buffer

// InProcess serves the agent in this process over in-memory pipes.
func InProcess(cfg *configs.Config, model llm.Model) (*Conn, error) {
	return InProcessWith(app.Options{Config: cfg, Model: model, ContextWindow: cfg.Model.ContextWindow})
}

// InProcessWith is InProcess with every option; In, Out and Log are set here.
func InProcessWith(o app.Options) (*Conn, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stdout, stderr := &SyncBuffer{}, &SyncBuffer{}
	o.In, o.Out, o.Log = inR, outW, logs.New(stderr, slog.LevelInfo)
	if o.ContextWindow == 0 {
		o.ContextWindow = o.Config.Model.ContextWindow
	}
	c, err := app.Start(o)
	if err != nil {
		return nil, err
	}
	return wire(c, inR, inW, outR, outW, stdout, stderr), nil
}

// OnHub connects a client to a hub shared with other connections, as one
// client of `mm serve`; In, Out and Log are set here.
func OnHub(h *protocol.Hub, o protocol.ConnOptions) *Conn {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stdout, stderr := &SyncBuffer{}, &SyncBuffer{}
	o.In, o.Out, o.Log = inR, outW, logs.New(stderr, slog.LevelInfo)
	return wire(h.Connect(o), inR, inW, outR, outW, stdout, stderr)
}

// wire is the client side of an in-process connection.
func wire(c *protocol.Conn, _ *io.PipeReader, inW *io.PipeWriter, outR *io.PipeReader, outW *io.PipeWriter, stdout, stderr *SyncBuffer) *Conn {
	done := make(chan struct{})
	go func() {
		c.Wait(context.Background())
		outW.Close()
		close(done)
	}()
	v := newValve(outR)
	conn := Dial(NewClient(), inW, io.TeeReader(v, stdout))
	conn.Stdout, conn.Stderr, conn.valve, conn.closeIn = stdout, stderr, v, inW.Close
	conn.wait = func() error {
		<-done
		return nil
	}
	return conn
}

// Process starts cmd (an `mm -acp` command line) and connects to its stdio.
func Process(cmd *exec.Cmd) (*Conn, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdout, stderr := &SyncBuffer{}, &SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	v := newValve(stdoutPipe)
	conn := Dial(NewClient(), stdin, io.TeeReader(v, stdout))
	conn.Stdout, conn.Stderr, conn.valve, conn.closeIn = stdout, stderr, v, stdin.Close
	conn.wait, conn.proc = sync.OnceValue(cmd.Wait), cmd.Process
	return conn, nil
}

// Wait waits for the agent to finish without closing its stdin, at most
// timeout (a process that ends on its own: its server gone, a refusal); it
// returns the agent's exit error, or context.DeadlineExceeded.
func (c *Conn) Wait(timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- c.wait() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		return context.DeadlineExceeded
	}
}

// Close closes the agent's stdin and waits for it to finish, and for the
// client's reader to read the agent's last line, at most timeout in all;
// it returns the agent's exit error, or context.DeadlineExceeded. Once it
// has returned, none of the connection's goroutines is left for a leak
// check to find.
func (c *Conn) Close(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	_ = c.closeIn()
	if c.valve != nil {
		c.valve.set(false) // a paused reader would never reach the end
	}
	err := c.Wait(timeout)
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.Done():
		return err
	case <-t.C:
		return fmt.Errorf("acptest: the client's reader had not ended %v after Close: %w", timeout, context.DeadlineExceeded)
	}
}

// Init sends a standard initialize request.
func (c *Conn) Init(ctx context.Context) (acp.InitializeResponse, error) {
	return c.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion: acp.ProtocolVersionNumber,
		ClientInfo:      &acp.Implementation{Name: "acptest", Version: "1.0"},
	})
}

// InitForms sends initialize announcing elicitation forms.
func (c *Conn) InitForms(ctx context.Context) (acp.InitializeResponse, error) {
	return c.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientInfo:         &acp.Implementation{Name: "acptest", Version: "1.0"},
		ClientCapabilities: acp.ClientCapabilities{Elicitation: &acp.ElicitationCapabilities{Form: &acp.ElicitationFormCapabilities{}}},
	})
}

// Ask sends one text prompt.
func (c *Conn) Ask(ctx context.Context, sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

// InitURL sends initialize announcing elicitation in URL mode.
func (c *Conn) InitURL(ctx context.Context) (acp.InitializeResponse, error) {
	return c.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientInfo:         &acp.Implementation{Name: "acptest", Version: "1.0"},
		ClientCapabilities: acp.ClientCapabilities{Elicitation: &acp.ElicitationCapabilities{Url: &acp.ElicitationUrlCapabilities{}}},
	})
}
