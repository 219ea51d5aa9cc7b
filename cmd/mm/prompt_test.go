package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestHugePromptRealProcess: the attack on a real mm, whose memory
// is its own: a prompt of "@x " repeated (5 MiB, or MM_HUGE_PROMPT_MIB),
// sent while a second session of the same editor pings. mm refuses it with
// a one-line error naming prompt.maxTextBytes, its session file stays
// small, and the test logs mm's time, peak and remaining RSS, and the
// worst ping→pong of the other session.
func TestHugePromptRealProcess(t *testing.T) {
	testwait.Short(t, "a prompt of 5 MiB")
	conn, cmd, _ := startMMScript(t, "rules:\n  - match: \"^ping$\"\n    steps: [{text: pong}]\n  - match: \"^@\"\n    steps: [{text: seen}]\n",
		"  contextWindow: 1073741824\nturns:\n  concurrency: 4\nsessions:\n  enabled: true\n")
	_, cwd, sess := openSession(t, conn)
	ctx := testwait.Context(t)
	other, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil {
		t.Fatal(err)
	}
	size := 5 << 20
	if n, err := strconv.Atoi(os.Getenv("MM_HUGE_PROMPT_MIB")); err == nil && n > 0 {
		size = n << 20
	}
	huge := strings.Repeat("@x ", size/3)
	pid := cmd.Process.Pid
	rssBefore := procStatus(pid, "VmRSS:")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var worst time.Duration
	pongs := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if _, err := conn.Ask(ctx, other.SessionId, "ping"); err != nil {
				t.Errorf("the other session's ping: %v", err)
				return
			}
			worst = max(worst, time.Since(start))
			pongs++
		}
	}()
	start := time.Now()
	_, err = conn.Ask(ctx, sess.SessionId, huge)
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	huge = ""
	rssAfter := procStatus(pid, "VmRSS:")
	time.Sleep(2 * time.Second)
	file := filepath.Join(cwd, ".mm/sessions", string(sess.SessionId)+".json")
	var fileSize int64
	if fi, err := os.Stat(file); err == nil {
		fileSize = fi.Size()
	}
	t.Logf("mm, a %.1f MiB prompt of @x: %v · RSS %d MiB before, peak %d MiB, %d MiB right after, %d MiB 2 s later · session file %.1f MiB · other session: %d ping→pong, worst %v",
		float64(size/3*3)/(1<<20), elapsed.Round(time.Millisecond), rssBefore>>20, procStatus(pid, "VmHWM:")>>20, rssAfter>>20, procStatus(pid, "VmRSS:")>>20,
		float64(fileSize)/(1<<20), pongs, worst.Round(time.Millisecond))

	if err == nil || !strings.Contains(err.Error(), "prompt.maxTextBytes") {
		t.Errorf("err = %v, want the prompt refused for prompt.maxTextBytes", err)
	}
	if fileSize > 1<<20 {
		t.Errorf("session file of %d bytes", fileSize)
	}
	if res, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("after the refusal: %v %v", res, err)
	}
}
