package tools

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// TestConfinedBashStreamsAndCancels: a bash command confined by bubblewrap
// streams its output live, and a cancel kills all of it, a process that
// left its group with setsid included (it is in the command's PID
// namespace).
func TestConfinedBashStreamsAndCancels(t *testing.T) {
	sb := sandboxtest.Bubblewrap(t)
	dir := sandboxtest.Own(t, t.TempDir())
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%100000)
	var mu sync.Mutex
	var live strings.Builder
	env := Env{Cwd: dir,
		Confine: func(cmd *exec.Cmd) (func(), error) {
			return sb.Wrap(cmd, sandbox.Policy{Mode: sandbox.WorkspaceWrite, Network: true, Writable: []string{dir}, User: sandboxtest.Tenant()}, nil)
		},
		Progress: func(out string) {
			mu.Lock()
			live.Reset()
			live.WriteString(out)
			mu.Unlock()
		},
	}
	command := "sleep " + marker + " & setsid sleep " + marker + " & echo ready; sleep " + marker
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := Prepare(env, "bash", bashCall(command))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, env, c) }()
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		ready := strings.Contains(live.String(), "ready")
		mu.Unlock()
		if ready && len(sleepers(marker)) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the confined command's output never streamed, or its sleeps never started: %v", sleepers(marker))
		}
	}
	cancel()
	select {
	case r := <-done:
		if !r.Failed || !strings.HasSuffix(r.Output, "[cancelled]") {
			t.Errorf("got %+v", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("Run did not return after the cancel")
	}
	for deadline := time.Now().Add(testwait.Hang); len(sleepers(marker)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the cancelled confined command survived: %v", sleepers(marker))
		}
	}
}

// sleepers are the pids of the processes running `sleep marker`.
func sleepers(marker string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			out = append(out, e.Name())
		}
	}
	return out
}
