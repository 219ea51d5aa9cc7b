package acptest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// agent is the far end of a client under test: the test reads the
// client's lines and writes the agent's.
type agent struct {
	t   *testing.T
	in  *bufio.Reader
	out io.WriteCloser
}

// dialAgent connects a client to a scripted agent; the connection ends
// with the test.
func dialAgent(t *testing.T) (*Conn, *agent) {
	t.Helper()
	toAgent, clientOut := io.Pipe()
	clientIn, fromAgent := io.Pipe()
	c := Dial(NewClient(), clientOut, clientIn)
	t.Cleanup(func() {
		fromAgent.Close()
		toAgent.Close()
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Error("the client's reader did not end with the agent's output")
		}
	})
	return c, &agent{t: t, in: bufio.NewReader(toAgent), out: fromAgent}
}

// read reads the client's next line.
func (a *agent) read() string {
	a.t.Helper()
	line, err := a.in.ReadString('\n')
	if err != nil {
		a.t.Fatal(err)
	}
	return strings.TrimSuffix(line, "\n")
}

// write writes the agent's lines.
func (a *agent) write(lines ...string) {
	a.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(a.out, l+"\n"); err != nil {
			a.t.Fatal(err)
		}
	}
}

func update(text string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}}}`
}

// TestPromptSettles: a call returns once every update written before its
// response has reached the Client, however many.
func TestPromptSettles(t *testing.T) {
	c, a := dialAgent(t)
	type result struct {
		r   acp.PromptResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Prompt(context.Background(), acp.PromptRequest{SessionId: "s", Prompt: []acp.ContentBlock{acp.TextBlock("hi")}})
		done <- result{r, err}
	}()
	if got, want := a.read(), `{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"prompt":[{"text":"hi","type":"text"}],"sessionId":"s"}}`; got != want {
		t.Errorf("the request\n%s\nwant\n%s", got, want)
	}
	const n = 5000
	for i := range n {
		a.write(update(fmt.Sprint(i % 10)))
	}
	a.write(`{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}`)
	res := <-done
	if res.err != nil || res.r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the prompt: %+v %v", res.r, res.err)
	}
	if got := len(c.Client.Updates("s")); got != n {
		t.Errorf("%d of the %d updates written before the response reached the client when it returned", got, n)
	}
}

// TestRefusedFails: what acp-go-sdk's types refuse fails the calls after
// it, as the SDK's client would have lost it; a request is answered with
// the SDK's error.
func TestRefusedFails(t *testing.T) {
	c, a := dialAgent(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.NewSession(context.Background(), acp.NewSessionRequest{Cwd: "/", McpServers: []acp.McpServer{}})
		done <- err
	}()
	a.read()
	a.write(`{"jsonrpc":"2.0","id":"mm-1","method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"}}}`)
	if got, want := a.read(), `{"jsonrpc":"2.0","id":"mm-1","error":{"code":-32602,"message":"Invalid params: options is required","data":{"error":"options is required"}}}`; got != want {
		t.Errorf("the refused request was answered\n%s\nwant\n%s", got, want)
	}
	a.write(`{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s"}}`)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "acp-go-sdk's types refuse the agent's session/request_permission: options is required") {
		t.Errorf("the call after a refused request: %v", err)
	}
}

// TestLineTooLong: a line over the SDK's 10 MiB ends the connection, as it
// ends the SDK's; the call waiting says why.
func TestLineTooLong(t *testing.T) {
	c, a := dialAgent(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.ListSessions(context.Background(), acp.ListSessionsRequest{})
		done <- err
	}()
	a.read()
	long := update(strings.Repeat("x", sdkMaxLine))
	go func() { _, _ = io.WriteString(a.out, long+"\n") }()
	err := <-done
	want := fmt.Sprintf("peer disconnected before response: acptest: the agent wrote a line of %d bytes, over the %d acp-go-sdk reads", len(long), sdkMaxLine)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the call: %v\nwant %s", err, want)
	}
	<-c.Done()
}

// TestAnswersAsTheSDK: the Client's answers to the agent's requests are
// the bytes acp-go-sdk's client writes.
func TestAnswersAsTheSDK(t *testing.T) {
	requests := []string{
		`{"jsonrpc":"2.0","id":"mm-1","method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c","title":"t"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"elicitation/create","params":{"sessionId":"s","mode":"form","message":"Color?","requestedSchema":{"type":"object","properties":{}}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/etc/hosts"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"_vendor/thing","params":{}}`,
	}
	ours := answers(t, requests, func(w io.Writer, r io.Reader) func() {
		c := Dial(NewClient(), w, r)
		return func() { <-c.Done() }
	})
	sdk := answers(t, requests, func(w io.Writer, r io.Reader) func() {
		c := acp.NewClientSideConnection(&sdkClient{NewClient()}, w, r)
		c.SetLogger(slog.New(slog.DiscardHandler))
		return func() { <-c.Done() }
	})
	for i := range requests {
		if ours[i] != sdk[i] {
			t.Errorf("the answer to %s\nours %s\nSDK  %s", requests[i], ours[i], sdk[i])
		}
	}
}

// answers writes each request to a client dialled by dial, and returns its
// answers, in the order of the requests.
func answers(t *testing.T, requests []string, dial func(io.Writer, io.Reader) (wait func())) []string {
	toAgent, clientOut := io.Pipe()
	clientIn, fromAgent := io.Pipe()
	wait := dial(clientOut, clientIn)
	in := bufio.NewReader(toAgent)
	var out []string
	for _, req := range requests {
		if _, err := io.WriteString(fromAgent, req+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := in.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, line)
	}
	fromAgent.Close()
	wait()
	toAgent.Close()
	return out
}

// sdkClient is the Client as acp-go-sdk's client takes one, for
// TestAnswersAsTheSDK.
type sdkClient struct{ *Client }

func (sdkClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (sdkClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (sdkClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (sdkClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (sdkClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (sdkClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (sdkClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}
