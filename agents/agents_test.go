package agents

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/agents/agenttest"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/jsonrpc"
)

// The asked agents of these tests are this test binary again, as
// agenttest's hostile agent.

func TestMain(m *testing.M) {
	agenttest.Main()
	goleak.VerifyTestMain(m)
}

// hangBound only detects hangs.
const hangBound = testwait.Hang

func startHostile(t *testing.T, mode string) *Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	a, err := Start(ctx, Config{Name: "hostile", Command: os.Args[0], Env: map[string]string{agenttest.Env: mode}}, t.TempDir(), "agents-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// personRelay answers permission requests as a person would: slowly, or
// not before the question is cancelled.
type personRelay struct {
	wait  time.Duration // 0: until cancelled
	asked atomic.Int64
}

func (r *personRelay) RequestPermission(ctx context.Context, _ acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	r.asked.Add(1)
	var after <-chan time.Time
	if r.wait > 0 {
		after = time.After(r.wait)
	}
	select {
	case <-after:
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "reject"}}}, nil
	case <-ctx.Done():
		return acp.RequestPermissionResponse{}, ctx.Err()
	}
}

func (r *personRelay) Elicit(context.Context, acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	return acp.UnstableCreateElicitationResponse{}, errors.New("no forms here")
}

// TestRequestFlood: an asked agent that sends 5,000 permission requests at
// once has maxRequests of them answered at a time and the others refused;
// a goroutine for each would wait for the person.
func TestRequestFlood(t *testing.T) {
	const n = 5000
	a := startHostile(t, agenttest.Requests+":5000")
	before := runtime.NumGoroutine()
	relay := &personRelay{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := a.Ask(ctx, "go", relay)
		errc <- err
	}()
	// The agent waits for all its answers: wait until maxRequests of them
	// have reached the person (who never answers), however long a loaded
	// machine takes, and then until mm stops moving.
	deadline := time.Now().Add(hangBound)
	for relay.asked.Load() < maxRequests {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests reached the person in %v, want %d", relay.asked.Load(), hangBound, maxRequests)
		}
		time.Sleep(5 * time.Millisecond)
	}
	last, still := 0, 0
	for still < 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if g := runtime.NumGoroutine(); g == last {
			still++
		} else {
			last, still = g, 0
		}
	}
	grew := runtime.NumGoroutine() - before
	t.Logf("%d requests at once: goroutines %+d after %v, %d before the person", n, grew, time.Since(start), relay.asked.Load())
	if grew > 3*maxRequests {
		t.Errorf("goroutines grew by %d", grew)
	}
	if asked := relay.asked.Load(); asked != maxRequests {
		t.Errorf("%d requests before the person, want %d", asked, maxRequests)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled question: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatal("the cancel did not end the question")
	}
}

// TestRequestsAnswered: requests past maxRequests are refused, not lost:
// the agent hears back about each, and its turn ends.
func TestRequestsAnswered(t *testing.T) {
	a := startHostile(t, agenttest.Requests+":200")
	relay := &personRelay{wait: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if _, err := a.Ask(ctx, "go", relay); err != nil {
		t.Fatal(err)
	}
	if asked := relay.asked.Load(); asked < maxRequests || asked > 200 {
		t.Errorf("%d requests reached the person", asked)
	}
}

// TestAnswerBounded: what mm keeps of an answer is bounded; the rest is
// counted in a note.
func TestAnswerBounded(t *testing.T) {
	c := &client{session: "s"}
	c.chunk("s", strings.Repeat("é", maxAnswer/2-1)) // maxAnswer - 2 bytes
	c.chunk("s", "éé")
	c.chunk("other", "ignored")
	c.chunk("s", "more")
	got := c.text()
	want := strings.Repeat("é", maxAnswer/2) + "\n[mm: the answer went on for 6 more bytes, left out]"
	if got != want {
		t.Errorf("the answer ends %q, is %d bytes; want %d", got[len(got)-80:], len(got), len(want))
	}
}

// TestConnLines: what the client keeps, what the agent is told and what
// mm's calls get, line by line: a line too long for mm, a line that is not
// JSON, a request of a method mm does not serve, a permission request the
// agent gives up.
func TestConnLines(t *testing.T) {
	big := strings.Repeat("x", maxLine)
	lines := []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"one "}}}}`,
		`not json at all`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hidden"}}}}`,
		`{"jsonrpc":"2.0","method":"_vendor/notice","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + big + `"}}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"big":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"big":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":"p","method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[]}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"p"}}`,
		`{"jsonrpc":"2.0","id":"bad","method":"session/request_permission","params":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"two"}}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"fs/read_text_file","params":{}}`,
	}
	a := &Agent{client: &client{}, log: slog.New(slog.DiscardHandler)}
	relay := &personRelay{} // answers when its question is given up
	a.client.start("s", relay)
	out, in := io.Pipe()
	var written syncbuf.Buffer
	a.connect(out, &written)
	var waits []func(context.Context) (jsonrpc.Response, error)
	for range 4 { // mm's calls 1 to 4
		_, wait := a.rpc.Expect("")
		waits = append(waits, wait)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for _, l := range lines {
			_, _ = io.WriteString(in, l+"\n")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	size := func(line string) string { return strconv.Itoa(len(line)) + " bytes" }
	r3, err3 := waits[2](ctx)
	if want := "it sent a response of " + size(lines[6]) + ", over 10 MiB"; err3 != nil || r3.Error == nil || r3.Error.Message != want {
		t.Errorf("the call answered on a line too long: %+v %v, want the error %q", r3.Error, err3, want)
	}
	if r4, err := waits[3](ctx); err != nil || string(r4.Result) != `{"stopReason":"end_turn"}` {
		t.Errorf("the call answered after it: %s %+v %v", r4.Result, r4.Error, err)
	}
	// The permission the agent gives up is answered from its own
	// goroutine, when its relay sees it, while the connection lasts.
	cancelled := `{"jsonrpc":"2.0","id":"p","error":{"code":-32800,"message":"Request cancelled","data":{"error":"context canceled"}}}`
	for !strings.Contains(written.String(), cancelled) {
		if ctx.Err() != nil {
			t.Fatalf("the permission given up was not answered cancelled:\n%s", written.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-wrote
	_ = in.Close()
	select {
	case <-a.read:
	case <-ctx.Done():
		t.Fatal("the read loop did not end with the agent's output")
	}
	if got, want := a.client.text(), "one [mm: the agent sent a line of "+size(lines[4])+", over 10 MiB; it was left out]two"; got != want {
		t.Errorf("the answer %q, want %q", got, want)
	}
	// The requests answered on the read loop are told in the order read.
	want := []string{
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"Invalid request","data":{"error":"the line is ` + strconv.Itoa(len(lines[5])) + ` bytes, longer than what mm reads of an asked agent (10MiB); it was skipped"}}}`,
		`{"jsonrpc":"2.0","id":"bad","error":{"code":-32602,"message":"Invalid params: options is required","data":{"error":"options is required"}}}`,
		`{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"Method not found","data":{"method":"fs/read_text_file"}}}`,
	}
	told := strings.Split(strings.TrimSuffix(written.String(), "\n"), "\n")
	told = slices.DeleteFunc(told, func(l string) bool { return l == cancelled })
	if !slices.Equal(told, want) {
		t.Errorf("the agent was told:\n%s\nwant\n%s", strings.Join(told, "\n"), strings.Join(want, "\n"))
	}
	if n := relay.asked.Load(); n != 1 {
		t.Errorf("%d permission requests relayed, want 1", n)
	}
}
