package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/protocol/acptest"
)

// scriptedConfig writes a config for the scripted provider: zero latency,
// no server, so the figures are mm's own.
func scriptedConfig(tb testing.TB) string {
	dir := tb.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("model:\n  provider: scripted\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkStartToInitialize measures a process start up to the initialize
// response being read: exec, runtime start, config, the actor system, and
// one JSON-RPC round trip.
func BenchmarkStartToInitialize(b *testing.B) {
	cfg := scriptedConfig(b)
	const req = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n"
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(mmBin, "-acp", "-config", cfg)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		_, _ = io.WriteString(stdin, req)
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.Contains(line, `"protocolVersion":1`) {
			b.Fatalf("%q %v", line, err)
		}
		b.StopTimer()
		stdin.Close()
		_ = cmd.Wait()
		b.StartTimer()
	}
}

// BenchmarkPongTurnOverPipes: a ping → pong turn with the real binary over
// real pipes, zero-latency model.
func BenchmarkPongTurnOverPipes(b *testing.B) {
	conn, sid := startScripted(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if res, err := conn.Ask(ctx, sid, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
			b.Fatal(res, err)
		}
		b.StopTimer()
		_, _ = conn.Ask(ctx, sid, "/new")
		conn.Client.Reset()
		b.StartTimer()
	}
}

// BenchmarkRSSAfterNewSession reports the resident memory of `mm -acp` after
// initialize and one session/new.
func BenchmarkRSSAfterNewSession(b *testing.B) {
	conn, _, pid := startScriptedPID(b)
	rss := float64(vmRSS(b, pid))
	_ = conn.Close(5 * time.Second)
	for b.Loop() {
	}
	b.ReportMetric(rss/1024, "MB-RSS")
}

func startScripted(b *testing.B) (*acptest.Conn, acp.SessionId) {
	conn, sid, _ := startScriptedPID(b)
	return conn, sid
}

func startScriptedPID(b *testing.B) (*acptest.Conn, acp.SessionId, int) {
	cmd := exec.Command(mmBin, "-acp", "-config", scriptedConfig(b))
	conn, err := acptest.Process(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(5 * time.Second) })
	ctx := context.Background()
	if _, err := conn.Init(ctx); err != nil {
		b.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	return conn, sess.SessionId, cmd.Process.Pid
}

// vmRSS reads a process's resident set in KiB.
func vmRSS(tb testing.TB, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
