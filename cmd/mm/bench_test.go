package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/mmbuild"
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
// response being read — exec, runtime start, package initialisers, config,
// and one JSON-RPC round trip — for mm and, alternated with it in the same
// run, for two floors: a bare Go process answering the same line
// (testdata/floor), and one that also links the three libraries mm must
// use and answers through acp-go-sdk (testdata/libfloor). It reports the
// medians: mm-ms, floor-ms, libs-ms.
func BenchmarkStartToInitialize(b *testing.B) {
	cfg := scriptedConfig(b)
	floor, libs := floorBin(b, "floor"), floorBin(b, "libfloor")
	var mm, fl, lf []time.Duration
	for b.Loop() {
		mm = append(mm, spawnToInitialize(b, exec.Command(mmBin, "-acp", "-config", cfg)))
		fl = append(fl, spawnToInitialize(b, exec.Command(floor)))
		lf = append(lf, spawnToInitialize(b, exec.Command(libs)))
	}
	b.ReportMetric(median(mm), "mm-ms")
	b.ReportMetric(median(fl), "floor-ms")
	b.ReportMetric(median(lf), "libs-ms")
	b.ReportMetric(maxOf(mm), "mm-max-ms")
}

// spawnToInitialize starts cmd, writes an initialize line and times the
// answer's arrival; then it closes stdin and waits for the exit.
func spawnToInitialize(b *testing.B, cmd *exec.Cmd) time.Duration {
	const req = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}` + "\n"
	cmd.Env = []string{"HOME=" + b.TempDir(), "PATH=" + os.Getenv("PATH")}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	_, _ = io.WriteString(stdin, req)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	d := time.Since(start)
	if err != nil || !strings.Contains(line, `"protocolVersion":1`) {
		b.Fatalf("%q %v", line, err)
	}
	stdin.Close()
	_ = cmd.Wait()
	return d
}

// floorBin builds testdata/<name> once per benchmark run.
func floorBin(b *testing.B, name string) string {
	out := filepath.Join(filepath.Dir(mmBin), name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := mmbuild.Build(out, "./testdata/"+name); err != nil {
		b.Fatal(err)
	}
	return out
}

func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

func maxOf(ds []time.Duration) float64 {
	return float64(slices.Max(ds)) / float64(time.Millisecond)
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
// initialize and one session/new, and the floor's (testdata/floor) after
// answering its initialize line.
func BenchmarkRSSAfterNewSession(b *testing.B) {
	conn, _, pid := startScriptedPID(b)
	rss := float64(vmRSS(b, pid))
	_ = conn.Close(5 * time.Second)
	floor := exec.Command(floorBin(b, "floor"))
	stdin, _ := floor.StdinPipe()
	stdout, _ := floor.StdoutPipe()
	if err := floor.Start(); err != nil {
		b.Fatal(err)
	}
	_, _ = io.WriteString(stdin, "{}\n")
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	floorRSS := float64(vmRSS(b, floor.Process.Pid))
	stdin.Close()
	_ = floor.Wait()
	for b.Loop() {
	}
	b.ReportMetric(rss/1024, "MB-RSS")
	b.ReportMetric(floorRSS/1024, "floor-MB-RSS")
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
