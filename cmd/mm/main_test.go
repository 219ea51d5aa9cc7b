package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/agents/agenttest"
	"github.com/mm-agent/mm/cmd/internal/cli"
	"github.com/mm-agent/mm/grains/grainstest"
	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/pgtest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/store"
)

var mmBin string

// clusterBin is the mm the cluster tests run as nodes: built with the
// race detector when the tests are.
var clusterBin string

// pg is the tests' throwaway PostgreSQL, started by the first test that
// needs it (store.url).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	agenttest.Main()  // the hostile agent of ask_hostile_test.go, when asked for
	grainstest.Main() // the cluster's outsider of outsider_test.go, when asked for
	dir, err := os.MkdirTemp("", "mm-bin")
	if err != nil {
		panic(err)
	}
	// mm, and mm-node beside it: mm serve on a cluster config runs the
	// mm-node next to it, as an installed pair does.
	// The mm the tests start keep their state (the folders' owners, the
	// index of project folders) in the run's folder, not in the user's
	// ~/.local/state/mm, which they would grow run after run; a test that
	// needs a state of its own sets XDG_STATE_HOME itself.
	if err := os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state")); err != nil {
		panic(err)
	}
	mmBin = filepath.Join(dir, "mm")
	if err := buildPair(dir); err != nil {
		fmt.Fprintf(os.Stderr, "building mm: %v\n", err)
		os.Exit(1)
	}
	clusterBin = mmBin
	if raceEnabled {
		// The cluster's nodes run with the race detector too, when the
		// tests do: mm's own code across processes is checked (mmRaces).
		clusterBin = filepath.Join(dir, "race", "mm")
		if err := buildPair(filepath.Dir(clusterBin), "-race"); err != nil {
			fmt.Fprintf(os.Stderr, "building mm -race: %v\n", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	pg.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildPair builds mm and mm-node into dir.
func buildPair(dir string, flags ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := mmbuild.Build(filepath.Join(dir, "mm"), ".", flags...); err != nil {
		return err
	}
	return mmbuild.Build(filepath.Join(dir, cli.NodeBinary), "../mm-node", flags...)
}

const script = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^slow$"
    steps: [{text: "thinking ", sleep: 30s}]
  - match: "^stall$"
    steps: [{text: "partial answer", stall: true}]
  - match: "^leave$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; setsid sleep 300 >/dev/null 2>&1 & echo $! > sid.pid; echo left"}}]
      - {text: "left them"}
  - match: "^orphan$"
    steps:
      - toolCalls: [{name: bash, args: {command: "sleep 0.2 >/dev/null 2>&1 & echo $! > orphan.pid"}}]
      - {text: "done"}
  - match: "^ask ping$"
    steps:
      - toolCalls: [{name: ask_agent, args: {agent: helper, question: ping}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ask write$"
    steps:
      - toolCalls: [{name: ask_agent, args: {agent: helper, question: write}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ask form$"
    steps:
      - toolCalls: [{name: ask_agent, args: {agent: helper, question: form}}]
      - {text: "model read: {{last_tool_output}}"}
  - match: "^ask slow$"
    steps:
      - toolCalls: [{name: ask_agent, args: {agent: helper, question: slow}}]
      - {text: "not reached"}
  - match: "^bash$"
    steps:
      - toolCalls: [{name: bash, args: {command: "echo $$ > pids; (sleep 300 & echo $! >> pids; wait) & echo $! >> pids; wait"}}]
usage: true
`

// startMM runs `mm -acp` on a config pointing at a scripted HTTP model, with
// a clean environment: no API key is set.
func startMM(t *testing.T, extraConfig string) (*acptest.Conn, *exec.Cmd, *llmtest.Server) {
	t.Helper()
	return startMMScript(t, script, extraConfig)
}

// startMMScript is startMM on a script of the caller's; extraConfig adds
// keys under model: and, unindented, top-level sections.
func startMMScript(t testing.TB, script, extraConfig string) (*acptest.Conn, *exec.Cmd, *llmtest.Server) {
	t.Helper()
	sc, err := llm.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(sc)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("model:\n  provider: openai\n  baseURL: %s\n%s", srv.URL(), extraConfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mmBin, "-acp", "-config", cfgPath)
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(5 * time.Second); _ = cmd.Process.Kill() })
	return conn, cmd, srv
}

// openSession initialises conn and opens a session in a temp dir; the
// context ends with the test, or after testwait.Hang.
func openSession(t *testing.T, conn *acptest.Conn) (context.Context, string, acp.NewSessionResponse) {
	t.Helper()
	cwd := t.TempDir()
	ctx, sess := openSessionIn(t, conn, cwd)
	return ctx, cwd, sess
}

// openSessionIn initialises conn and opens a session in cwd (a served
// mm's project, inside its roots); the context ends with the test, or
// after testwait.Hang.
func openSessionIn(t *testing.T, conn *acptest.Conn, cwd string) (context.Context, acp.NewSessionResponse) {
	t.Helper()
	ctx := testwait.Context(t)
	if _, err := conn.Init(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, sess
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(mmBin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != protocol.Version {
		t.Errorf("--version printed %q, want %q", got, protocol.Version)
	}
}

func TestOverPipes(t *testing.T) {
	conn, _, _ := startMM(t, "")
	ctx := testwait.Context(t)
	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if init.AgentInfo.Version != protocol.Version {
		t.Errorf("agentInfo.version %q != --version %q", init.AgentInfo.Version, protocol.Version)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := conn.Ask(ctx, sess.SessionId, "ping")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != acp.StopReasonEndTurn || acptest.Text(conn.Client.Updates(sess.SessionId)) != "pong" {
		t.Errorf("stop %s, text %q", res.StopReason, acptest.Text(conn.Client.Updates(sess.SessionId)))
	}
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("exit: %v\n%s", err, conn.Stderr.String())
	}
	// stdout carried JSON-RPC 2.0 messages only, one per line.
	sc := bufio.NewScanner(strings.NewReader(conn.Stdout.String()))
	lines := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m["jsonrpc"] != "2.0" {
			t.Errorf("stdout line is not JSON-RPC: %q", sc.Text())
		}
		lines++
	}
	if lines < 5 {
		t.Errorf("only %d stdout lines", lines)
	}
	logs := conn.Stderr.String()
	for _, want := range []string{"mm " + protocol.Version, "[acp] initialize: client acptest 1.0", "[acp] turn done:"} {
		if !strings.Contains(logs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, logs)
		}
	}
}

// TestExit shows that a closed stdin or SIGTERM during a turn ends the
// process cleanly, with exit code 0.
func TestExit(t *testing.T) {
	for _, how := range []string{"stdin EOF", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			conn, cmd, srv := startMM(t, "")
			ctx := testwait.Context(t)
			if _, err := conn.Init(ctx); err != nil {
				t.Fatal(err)
			}
			sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = conn.Ask(ctx, sess.SessionId, "slow") }()
			waitUntil(t, "the slow turn asking the model", func() bool { return srv.Requests() > 0 })
			start := time.Now()
			if how == "SIGTERM" {
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			if err := conn.Close(testwait.Hang); err != nil {
				t.Fatalf("exit: %v\n%s", err, conn.Stderr.String())
			}
			t.Logf("exited in %v", time.Since(start))
		})
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("model:\n  provder: openai\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mmBin, "-acp", "-config", path)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want 1", err)
	}
	if !strings.Contains(string(out), `unknown key "model.provder"`) || !strings.Contains(string(out), path) {
		t.Errorf("error does not name the key and the file: %s", out)
	}
	// MM_CONFIG is read when -config is absent.
	cmd = exec.Command(mmBin, "-acp")
	cmd.Env = append(os.Environ(), "MM_CONFIG="+path)
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "model.provder") {
		t.Errorf("MM_CONFIG ignored: %s", out)
	}
}

// TestStoreUnreachable: a store.url whose database cannot be reached stops
// mm -acp at start, with exit status 1 and one line that names the key and
// hides the password, rather than failing every save later.
func TestStoreUnreachable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pg.yaml")
	cfg := "sessions:\n  enabled: true\nstore:\n  url: postgres://mm:s3cret@127.0.0.1:1/mm?connect_timeout=5\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(mmBin, "-acp", "-config", path).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want 1; output:\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "store.url") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "connection refused") || strings.Contains(string(out), "s3cret") {
		t.Errorf("want one line naming store.url and why, without the password:\n%s", out)
	}
	t.Log(line)
}

// TestStdinEOFKillsCommands: when the editor goes away during a bash
// command, mm exits 0 and no process it started survives.
func TestStdinEOFKillsCommands(t *testing.T) {
	conn, _, _ := startMM(t, "")
	ctx, cwd, sess := openSession(t, conn)
	go func() { _, _ = conn.Ask(ctx, sess.SessionId, "bash") }()
	var pids []int
	waitUntil(t, "the command's three processes started", func() bool {
		b, _ := os.ReadFile(filepath.Join(cwd, "pids"))
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		return len(pids) >= 3
	})
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("exit: %v", err)
	}
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("process %d outlived mm", pid)
		}
	}
}

// TestBannerCountsSkillsAndHooks: the start-up banner says how many skills
// and hooks were loaded, and warns about a skill that a command shadows and
// a broken SKILL.md.
func TestBannerCountsSkillsAndHooks(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"greetings": "---\nname: greetings\ndescription: Greet.\n---\nHello.\n",
		"compact":   "---\nname: compact\ndescription: Shadowed.\n---\nx\n",
		"broken":    "no front matter\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "SKILL.md"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conn, _, _ := startMM(t, fmt.Sprintf("skills:\n  dirs: [%q]\nhooks:\n  preToolCall: [\"true\"]\n  postAsk: [\"true\", \"true\"]\n", dir))
	if _, err := conn.Init(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(testwait.Hang)
	log := conn.Stderr.String()
	for _, want := range []string{"1 skill(s) · 3 hook(s)", `skill "compact"`, "/compact", filepath.Join(dir, "broken", "SKILL.md")} {
		if !strings.Contains(log, want) {
			t.Errorf("banner lacks %q:\n%s", want, log)
		}
	}
}

// TestHelpExitsZero: mm -h prints the usage and succeeds.
func TestHelpExitsZero(t *testing.T) {
	for _, flag := range []string{"-h", "--help"} {
		cmd := exec.Command(mmBin, flag)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("mm %s: %v", flag, err)
		}
		if !strings.Contains(stderr.String(), "usage: mm -acp") {
			t.Errorf("mm %s printed %q", flag, stderr.String())
		}
	}
	if err := exec.Command(mmBin, "-no-such-flag").Run(); err == nil {
		t.Error("an unknown flag succeeded")
	}
}

// TestUnexpectedArguments: words mm does not understand are a usage error
// (exit 2), not ignored: an image whose default argument is -acp, run with
// `serve …` the wrong way round, must not quietly speak ACP on stdio.
func TestUnexpectedArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		word string // the first word mm names
	}{
		{[]string{"-acp", "serve", "-listen", "0.0.0.0:8765"}, "serve"},
		{[]string{"-acp", "extra"}, "extra"},
		{[]string{"--version", "extra"}, "extra"},
		{[]string{"-config", "x.yaml", "connect", "ws://127.0.0.1:1/acp"}, "connect"},
	} {
		cmd := exec.Command(mmBin, c.args...)
		cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		want := fmt.Sprintf("mm: unexpected argument %q", c.word)
		if code != 2 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "usage: mm -acp") || stdout.Len() != 0 {
			t.Errorf("mm %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestBannerSaysWhereTheURLComesFrom: OPENAI_BASE_URL replaces the default
// URL, not the one the config file wrote, and the banner says which won.
func TestBannerSaysWhereTheURLComesFrom(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ config, want string }{
		{"model:\n  name: m\n", "at http://env.example:1/v1 (from OPENAI_BASE_URL)"},
		{"model:\n  baseURL: http://file.example:2/v1\n", "at http://file.example:2/v1 (from " + filepath.Join(dir, "config.yaml") + ")"},
	} {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte(c.config), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(mmBin, "-acp", "-config", path)
		cmd.Env = append(os.Environ(), "OPENAI_BASE_URL=http://env.example:1/v1")
		cmd.Stdin = strings.NewReader("")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("banner lacks %q:\n%s", c.want, stderr.String())
		}
	}
}

// TestPipedRequestsAreAnswered: requests read before stdin closes are
// answered before mm exits, as a one-line smoke test needs:
// printf '…initialize…\n…session/new…\n' | mm -acp.
func TestPipedRequestsAreAnswered(t *testing.T) {
	cmd := exec.Command(mmBin, "-acp", "-config", "../../configs/examples/scripted.yaml")
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n" +
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`, t.TempDir()) + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[float64]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m struct {
			ID     *float64        `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.ID != nil && m.Result != nil {
			ids[*m.ID] = true
		}
	}
	if !ids[1] || !ids[2] {
		t.Fatalf("responses: %s", out)
	}
}

// TestExitKillsWhatCommandsLeft: a background job of a finished command
// and a process that left the group with setsid are killed when mm exits.
func TestExitKillsWhatCommandsLeft(t *testing.T) {
	conn, _, _ := startMM(t, "")
	ctx, cwd, sess := openSession(t, conn)
	if res, err := conn.Ask(ctx, sess.SessionId, "leave"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("%v %v", res, err)
	}
	pids := acptest.ReadPids(t, filepath.Join(cwd, "bg.pid"), filepath.Join(cwd, "sid.pid"))
	for _, pid := range pids {
		if !acptest.Alive(pid) {
			t.Fatalf("process %d is not running after its command ended", pid)
		}
	}
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("exit: %v", err)
	}
	for _, pid := range pids {
		// Killed before mm exits; its death may take a moment to show.
		deadline := time.Now().Add(testwait.Hang)
		for acptest.Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if acptest.Alive(pid) {
			t.Errorf("process %d outlived mm by %v", pid, testwait.Hang)
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
}

// TestOrphansAreReaped: a background job that outlives its command is
// re-parented to mm (its subreaper), and once it ends mm collects its exit
// status: no zombie piles up under a long-lived mm.
func TestOrphansAreReaped(t *testing.T) {
	conn, cmd, _ := startMM(t, "")
	ctx, cwd, sess := openSession(t, conn)
	if res, err := conn.Ask(ctx, sess.SessionId, "orphan"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("%v %v", res, err)
	}
	pid := acptest.ReadPids(t, filepath.Join(cwd, "orphan.pid"))[0]
	// While it sleeps, it is mm's child: re-parented, not left to init.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if ppid, _ := strconv.Atoi(f[1]); ppid != cmd.Process.Pid && f[0] != "Z" {
			t.Errorf("the orphan's parent is %d, not mm (%d)", ppid, cmd.Process.Pid)
		}
	}
	waitUntil(t, fmt.Sprintf("process %d ended and reaped", pid), func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err != nil
	})
}

// TestContextWindow: usage_update.size is model.contextWindow when set, and
// the server's own figure (llama.cpp /props) when it is 0.
func TestContextWindow(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   int
	}{
		{"  contextWindow: 20480\n", 20480},
		{"  contextWindow: 0\n", 8192}, // llmtest's /props
	} {
		conn, _, _ := startMM(t, tc.config)
		ctx := testwait.Context(t)
		if _, err := conn.Init(ctx); err != nil {
			t.Fatal(err)
		}
		sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		// The probe waits for a quiet moment, a quarter of a second at
		// most while turns follow each other: turns until it has answered,
		// however long a busy machine makes it take.
		size, turns := 0, 0
		for ; size != tc.want; turns++ {
			if ctx.Err() != nil {
				t.Fatalf("%q: usage_update.size = %d after %d turns and %v, want %d", tc.config, size, turns, testwait.Hang, tc.want)
			}
			if _, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil {
				t.Fatal(err)
			}
			ups := conn.Client.Updates(sess.SessionId)
			if u := ups[len(ups)-1].UsageUpdate; u != nil {
				size = u.Size
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%q: usage_update.size %d after %d turn(s)", tc.config, size, turns)
	}
}

// readmeSmokeTest returns the README's lines: the one-line smoke test
// (`printf '…' | mm -acp`) and the stderr it shows, the fenced block after
// the paragraph that begins with "stderr".
func readmeSmokeTest(t *testing.T) (line string, stderr []string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	afterStderr, fenced := false, false
	for _, l := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(l, "printf '") && strings.HasSuffix(l, "| mm -acp"):
			line = l
		case line == "" || stderr != nil && !fenced:
		case strings.HasPrefix(l, "stderr"):
			afterStderr = true
		case afterStderr && strings.HasPrefix(l, "```"):
			if fenced {
				afterStderr, fenced = false, false
				continue
			}
			fenced, stderr = true, []string{}
		case fenced:
			stderr = append(stderr, l)
		}
	}
	if line == "" {
		t.Fatal("the README has no `printf '…' | mm -acp` line")
	}
	return line, stderr
}

// runSmokeTest runs the line as a user pastes it on a machine with no mm
// config and no model URL in the environment.
func runSmokeTest(t *testing.T, line string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(mmBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"MM_CONFIG=", "HOME="+t.TempDir(), "XDG_STATE_HOME=", "OPENAI_BASE_URL=")
	cmd.Dir = t.TempDir()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, errb.String())
	}
	return string(out), errb.String()
}

// TestREADMESmokeTest runs the README's one-line smoke test as a user
// pastes it: one initialize answer on stdout, exit 0 at end of input.
func TestREADMESmokeTest(t *testing.T) {
	line, _ := readmeSmokeTest(t)
	out, _ := runSmokeTest(t, line)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"id":1,"result":{"agentCapabilities"`) || !strings.Contains(lines[0], `"protocolVersion":1`) {
		t.Errorf("stdout: %q", out)
	}
}

// TestEveryPipedRequestIsAnswered: stdin closing is no reason to drop
// answers. initialize, a load and 2,000 requests piped in, then end of
// file: every request is answered, once, before mm exits.
func TestEveryPipedRequestIsAnswered(t *testing.T) {
	testwait.Short(t, "2,000 piped requests, three times")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("model:\n  provider: scripted\nsessions:\n  enabled: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	const sid = "20260101-000000-00000001"
	data, err := store.Marshal(&store.File{ID: sid, Cwd: cwd, Created: time.Now(), Updated: time.Now(), Mode: "yolo", Model: "default",
		History: []history.Message{{Role: history.RoleSystem, Content: "system"}, {Role: history.RoleUser, Content: "ping"}, {Role: history.RoleAssistant, Content: "pong"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteAtomic(store.Path(cwd, ".mm/sessions", sid), data); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}` + "\n")
	fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":%q,"cwd":%q,"mcpServers":[]}}`+"\n", sid, cwd)
	const n = 2000
	for i := 0; i < n; i++ {
		id := 3 + i
		switch i % 5 {
		case 0:
			fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`+"\n", id, cwd)
		case 1, 2:
			fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"session/set_mode","params":{"sessionId":%q,"modeId":%q}}`+"\n", id, sid, []string{"ask", "yolo"}[i%2])
		case 3:
			if i%2 == 0 {
				fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"authenticate","params":{"methodId":"none"}}`+"\n", id)
			} else {
				fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"session/list","params":{"cwd":%q}}`+"\n", id, cwd)
			}
		default:
			fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"ping"}]}}`+"\n", id, sid)
		}
	}
	for run := 0; run < 3; run++ {
		cmd := exec.Command(mmBin, "-acp", "-config", cfg)
		cmd.Stdin = strings.NewReader(in.String())
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		answers := map[float64]int{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m struct {
				ID     *float64 `json:"id"`
				Method string   `json:"method"`
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.ID != nil && m.Method == "" {
				answers[*m.ID]++
			}
		}
		for id := 1.0; id <= n+2; id++ {
			if answers[id] != 1 {
				t.Fatalf("run %d: request %v answered %d times (%d of %d answered); stderr:\n%s", run, id, answers[id], len(answers), n+2, stderr.String())
			}
		}
	}
}

// TestREADMESmokeTestStderr: the stderr the README shows for its smoke
// test is what mm prints, line for line, and a normal end of input adds no
// line of the SDK's (its "connection closed" is noise to a user).
func TestREADMESmokeTestStderr(t *testing.T) {
	line, shown := readmeSmokeTest(t)
	if len(shown) == 0 {
		t.Fatal("the README shows no stderr for its smoke test (a fenced block after the paragraph that begins with \"stderr\")")
	}
	_, stderr := runSmokeTest(t, line)
	got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	printed := map[string]bool{}
	for _, l := range got {
		printed[l] = true
	}
	for _, l := range shown {
		if !printed[l] {
			t.Errorf("the README shows the stderr line %q, which mm does not print", l)
		}
	}
	if strings.Contains(stderr, "connection closed") {
		t.Errorf("a normal end of input logs the SDK's connection closed:\n%s", stderr)
	}
	if len(got) != len(shown) {
		t.Errorf("mm prints %d stderr lines, the README shows %d:\n%s", len(got), len(shown), stderr)
	}
}
