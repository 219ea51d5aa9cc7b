package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/agents/agenttest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm/llmtest"
)

// The hostile agents of these tests are this test binary again, with
// agenttest.Env naming what it does wrong (TestMain hands over to it).

const hostileAskScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^ask$"
    steps:
      - toolCalls: [{name: ask_agent, args: {agent: hostile, question: go}}]
      - {text: "read it"}
usage: true
`

// startHostile runs mm, with four turn slots, able to ask the hostile
// agent in mode, and opens a session.
func startHostile(t *testing.T, mode string) (*acptest.Conn, *exec.Cmd, *llmtest.Server, context.Context, acp.SessionId) {
	t.Helper()
	// A window large enough for an answer of 100,000 pieces.
	conn, cmd, srv := startMMScript(t, hostileAskScript, fmt.Sprintf("  contextWindow: 1000000\nturns:\n  concurrency: 4\nagents:\n  - {name: hostile, command: %q, env: {%s: %q}}\n",
		os.Args[0], agenttest.Env, mode))
	ctx := testwait.Context(t)
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return conn, cmd, srv, ctx, sess.SessionId
}

// memKiB reads a figure of a process's memory (VmRSS, VmHWM) in KiB.
func memKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}

// pongWatch asks "ping" in a session of its own, one turn after another,
// until stopped; stop returns the slowest turn and the number of turns.
func pongWatch(t *testing.T, conn *acptest.Conn, ctx context.Context) (stop func() (time.Duration, int)) {
	t.Helper()
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var worst time.Duration
	var turns int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			r, err := conn.Ask(ctx, sess.SessionId, "ping")
			if err != nil || r.StopReason != acp.StopReasonEndTurn {
				t.Errorf("the other session's ping: %v %v", r.StopReason, err)
				return
			}
			worst = max(worst, time.Since(start))
			turns++
		}
	}()
	return func() (time.Duration, int) {
		close(done)
		wg.Wait()
		return worst, turns
	}
}

// askHostile asks the hostile agent in mode once, through ask_agent, while
// another session pings, and logs the figures. It returns the ask_agent
// call's output, as the user reads it, once it is checked to be what the
// model read too.
func askHostile(t *testing.T, mode string) string {
	t.Helper()
	conn, cmd, srv, ctx, sid := startHostile(t, mode)
	watch := pongWatch(t, conn, ctx)
	rss := memKiB(t, cmd.Process.Pid, "VmRSS")
	start := time.Now()
	res, err := conn.Ask(ctx, sid, "ask")
	elapsed := time.Since(start)
	worst, turns := watch()
	t.Logf("%s: answered in %v; mm's RSS %d MiB, at most %d MiB; the other session's ping: worst %v over %d turns",
		mode, elapsed, rss>>10, memKiB(t, cmd.Process.Pid, "VmHWM")>>10, worst, turns)
	if err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the turn: %v %v", res.StopReason, err)
	}
	var shown string
	for _, u := range conn.Client.Updates(sid) {
		if c := u.ToolCallUpdate; c != nil && c.Status != nil && (*c.Status == acp.ToolCallStatusCompleted || *c.Status == acp.ToolCallStatusFailed) &&
			len(c.Content) > 0 && c.Content[0].Content != nil && c.Content[0].Content.Content.Text != nil {
			shown = c.Content[0].Content.Content.Text.Text
		}
	}
	// One more turn of this session's, whose request carries its history.
	if _, err := conn.Ask(ctx, sid, "ping"); err != nil {
		t.Fatal(err)
	}
	msgs, _ := srv.LastRequest()["messages"].([]any)
	read := ""
	for _, m := range msgs {
		if m := m.(map[string]any); m["role"] == "tool" {
			read, _ = m["content"].(string)
		}
	}
	if read != shown {
		t.Errorf("the user read %.200q, the model %.200q", shown, read)
	}
	return shown
}

// TestAskAgentBurst: an asked agent that streams 100,000 updates at once is
// read to its end (acp-go-sdk's client, which mm's once was, closes the
// connection past a queue of 1,024 notifications). The model
// reads the answer's head and tail, within its budget, and the file its
// result names holds the whole of it.
func TestAskAgentBurst(t *testing.T) {
	text := askHostile(t, agenttest.Burst+":100000")
	m := regexp.MustCompile(`the whole output is in (\S+\.out):`).FindStringSubmatch(text)
	if m == nil || !strings.HasPrefix(text, "a a ") || !strings.HasSuffix(text, "a a ") {
		t.Fatalf("the model read %.200q … %q", text, text[max(len(text)-200, 0):])
	}
	whole, err := os.ReadFile(m[1])
	if n := strings.Count(string(whole), "a "); err != nil || n != 100000 {
		t.Errorf("the answer's file holds %d of the 100,000 pieces (%v)", n, err)
	}
}

// TestAskAgentLongLine: a line of 12 MiB from an asked agent, over the
// 10 MiB mm reads, is left out with a note the model reads; the rest of the
// answer arrives.
func TestAskAgentLongLine(t *testing.T) {
	text := askHostile(t, agenttest.BigLine+":12")
	want := "before [mm: the agent sent a line of 12 MiB, over 10 MiB; it was left out] after"
	if text != want {
		t.Errorf("the model read %.300q, want %q", text, want)
	}
}

// TestAskAgentLongResponse: the answer to the prompt on a line of 12 MiB
// fails the question with its real cause.
func TestAskAgentLongResponse(t *testing.T) {
	text := askHostile(t, agenttest.BigResponse+":12")
	want := "partial\n" + `[error: agent "hostile" failed: it sent a response of 12 MiB, over 10 MiB]`
	if text != want {
		t.Errorf("the model read %.300q, want %q", text, want)
	}
}

// TestAskAgentExits: an asked agent that exits in the middle of a question
// is said to have exited, with its status.
func TestAskAgentExits(t *testing.T) {
	text := askHostile(t, agenttest.Exit)
	want := `[error: agent "hostile" failed: it exited before answering (exit status 3)]`
	if text != want {
		t.Errorf("the model read %.300q, want %q", text, want)
	}
}

// TestAskAgentFloodCancelled: an asked agent that streams without end and
// ignores session/cancel is killed a second after the cancel (the grace is
// the only way out: it never answers); the turn ends cancelled, and what mm
// keeps of its answer is bounded meanwhile.
func TestAskAgentFloodCancelled(t *testing.T) {
	testwait.Short(t, "3 s of an asked agent's flood")
	conn, cmd, _, ctx, sid := startHostile(t, agenttest.Flood)
	watch := pongWatch(t, conn, ctx)
	rss := memKiB(t, cmd.Process.Pid, "VmRSS")
	done := make(chan acp.StopReason, 1)
	go func() {
		res, _ := conn.Ask(ctx, sid, "ask")
		done <- res.StopReason
	}()
	time.Sleep(3 * time.Second) // the flood goes on
	start := time.Now()
	_ = conn.Cancel(ctx, acp.CancelNotification{SessionId: sid})
	select {
	case r := <-done:
		worst, turns := watch()
		t.Logf("cancelled after 3s of flood in %v; mm's RSS %d MiB, at most %d MiB; the other session's ping: worst %v over %d turns",
			time.Since(start), rss>>10, memKiB(t, cmd.Process.Pid, "VmHWM")>>10, worst, turns)
		if r != acp.StopReasonCancelled {
			t.Errorf("stopReason %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the cancel did not end the question")
	}
	if hwm := memKiB(t, cmd.Process.Pid, "VmHWM"); hwm > 256<<10 {
		t.Errorf("mm's RSS reached %d MiB", hwm>>10)
	}
}

// TestAskCommandHostile: mm --ask reads a burst to its end, and says why an
// agent failed.
func TestAskCommandHostile(t *testing.T) {
	run := func(mode string) (string, string, error) {
		cmd := exec.Command(mmBin, "--ask", os.Args[0], "go")
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), agenttest.Env+"="+mode)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			t.Logf("mm --ask, %s: %v, peak RSS %d MiB", mode, time.Since(start), ru.Maxrss>>10)
		}
		return stdout.String(), stderr.String(), err
	}
	out, stderr, err := run(agenttest.Burst + ":100000")
	if err != nil || strings.Count(out, "a ") != 100000 {
		t.Errorf("burst: %d pieces, %v\n%s", strings.Count(out, "a "), err, stderr)
	}
	out, stderr, err = run(agenttest.BigResponse + ":12")
	if err == nil || out != "partial" || !strings.Contains(stderr, `agent "agent" failed: it sent a response of 12 MiB, over 10 MiB`) {
		t.Errorf("a response of 12 MiB: %q, %v\n%s", out, err, stderr)
	}
}
