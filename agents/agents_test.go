package agents

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/agents/agenttest"
	"github.com/mm-agent/mm/internal/testwait"
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
// the SDK would have served every one on a goroutine of its own, all
// waiting for the person.
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

// TestInbound: what reaches the SDK, what the agent is told, what the
// answer keeps, line by line.
func TestInbound(t *testing.T) {
	big := strings.Repeat("x", sdkMaxLine)
	lines := []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"one "}}}}`,
		`not json at all`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hidden"}}}}`,
		`{"jsonrpc":"2.0","method":"_vendor/notice","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + big + `"}}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"big":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"big":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"two"}}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"fs/read_text_file","params":{}}`,
	}
	c := &client{session: "s"}
	var written strings.Builder
	in := newInbound(strings.NewReader(strings.Join(lines, "\n")+"\n"), c, newWire(&written), slog.New(slog.DiscardHandler))
	var sdk strings.Builder
	buf := make([]byte, 1000)
	for {
		n, err := in.Read(buf)
		sdk.Write(buf[:n])
		if err != nil {
			break
		}
	}
	size := func(line string) string { return strconv.Itoa(len(line)) + " bytes" }
	wantSDK := `{"error":{"code":-32603,"message":"it sent a response of ` + size(lines[6]) + `, over 10 MiB","data":{"error":"it sent a response of ` + size(lines[6]) + `, over 10 MiB"}},"id":3,"jsonrpc":"2.0"}` + "\n" +
		lines[7] + "\n" + lines[9] + "\n"
	if sdk.String() != wantSDK {
		t.Errorf("the SDK read:\n%s\nwant\n%s", sdk.String(), wantSDK)
	}
	wantWritten := `{"error":{"code":-32603,"message":"the request is ` + size(lines[5]) + `, over the 10 MiB mm reads","data":{"error":"the request is ` + size(lines[5]) + `, over the 10 MiB mm reads"}},"id":7,"jsonrpc":"2.0"}` + "\n"
	if written.String() != wantWritten {
		t.Errorf("the agent was told:\n%s\nwant\n%s", written.String(), wantWritten)
	}
	if got, want := c.text(), "one [mm: the agent sent a line of "+size(lines[4])+", over 10 MiB; it was left out]two"; got != want {
		t.Errorf("the answer %q, want %q", got, want)
	}
}
