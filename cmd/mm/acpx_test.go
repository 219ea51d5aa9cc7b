package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
)

// acpxDir is the folder of acpx 0.19.1, a real headless ACP client: its
// package.json pins it, its package-lock.json what it installs.
const acpxDir = "testdata/acpx"

// TestAcpx: acpx 0.19.1 runs a prompt through mm -acp, and through mm
// connect to mm serve, the same way (pong, [done] end_turn, exit 0); SIGINT
// to the agent (Ctrl-C in the terminal that started it) answers the prompt
// in flight cancelled through both ([done] cancelled, exit 0); and an
// error of mm's says why in the line acpx prints (a cwd outside
// serve.roots: before, only "[error] RUNTIME: Invalid params").
func TestAcpx(t *testing.T) {
	testwait.Short(t, "acpx (Node.js)")
	node := npmPackage(t, acpxDir, "acpx", "0.19.1")
	// The package's bin, as npm links it.
	entry, err := filepath.EvalSymlinks(filepath.Join(acpxDir, "node_modules", ".bin", "acpx"))
	if err != nil {
		t.Fatal(err)
	}
	acpx, err := filepath.Abs(entry)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(serveScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(scriptedModel+"skills:\n  dirs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "")
	inRoots := s.project(t)
	// run runs acpx with agent in cwd; interrupt, when set, sends SIGINT
	// to the agent (not to acpx) once the prompt has begun.
	run := func(agent, cwd, prompt string, interrupt bool) (string, error) {
		ctx := testwait.Context(t)
		cmd := exec.CommandContext(ctx, node, acpx, "--agent", agent, "--approve-all", "--format", "text", "--timeout", "60", "exec", prompt)
		cmd.Dir = cwd
		cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "MM_TOKEN=" + serveToken}
		out := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if interrupt {
			go func() {
				for ctx.Err() == nil && !strings.Contains(out.String(), "thinking") {
					time.Sleep(20 * time.Millisecond)
				}
				signalAgent(t, agent, syscall.SIGINT)
			}()
		}
		err := cmd.Wait()
		return out.String(), err
	}
	agents := map[string]string{
		"mm -acp":    mmBin + " -acp -config " + cfg,
		"mm connect": mmBin + " connect " + s.ws,
	}
	for name, agent := range agents {
		t.Run(name, func(t *testing.T) {
			out, err := run(agent, inRoots, "ping", false)
			if err != nil || !strings.Contains(out, "pong") || !strings.Contains(out, "[done] end_turn") {
				t.Errorf("ping: %v\n%s", err, out)
			}
			out, err = run(agent, inRoots, "slow", true)
			if err != nil || !strings.Contains(out, "[done] cancelled") {
				t.Errorf("SIGINT during a prompt: %v\n%s", err, out)
			}
		})
	}
	out, err := run(agents["mm connect"], dir, "ping", false)
	if err == nil || !strings.Contains(out, "is outside the folders this server serves (serve.roots") {
		t.Errorf("a cwd outside serve.roots: %v\n%s", err, out)
	}
}

// signalAgent sends sig to the processes whose command line is agent's.
func signalAgent(t *testing.T, agent string, sig syscall.Signal) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " ") == agent {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
}
