//go:build unix

package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangBound is how long a call may take before the test calls it hung. It
// is no speed limit: shared machines are slow, and only a hang should fail.
// For the same reason the Runners of tests that are not about the timeout
// get it as their Timeout, instead of hooks.timeout's 10 s.
const hangBound = testwait.Hang

// logBuf collects what a logger writes; the hooks may log from the test's
// goroutines and theirs at once.
type logBuf struct{ syncbuf.Buffer }

func (l *logBuf) lines() []string { return l.Lines() }

// only asserts that the log holds exactly one record, at level, whose
// message is msg.
func (l *logBuf) only(t *testing.T, level, msg string) {
	t.Helper()
	lines := l.lines()
	if len(lines) != 1 {
		t.Fatalf("want one log line, got %d: %q", len(lines), lines)
	}
	if !strings.Contains(lines[0], "level="+level+" ") || !strings.Contains(lines[0], "msg="+strconv.Quote(msg)) {
		t.Fatalf("want a %s line %q, got %q", level, msg, lines[0])
	}
}

func (l *logBuf) empty(t *testing.T) {
	t.Helper()
	if lines := l.lines(); len(lines) != 0 {
		t.Fatalf("want no log, got %q", lines)
	}
}

func newLog() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// script writes an executable bash script into dir and returns the hook
// line that runs it from dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return "./" + name
}

// within runs f and fails the test if it has not returned after hangBound.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatalf("still running after %s", hangBound)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readPid reads a pid a hook wrote; ok is false while the file is missing
// or not yet written.
func readPid(path string) (pid int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// dead says whether pid is gone or a zombie: a killed orphan stays a
// zombie until its new parent reaps it, and it is dead all the same.
func dead(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	return len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X')
}

func assertDead(t *testing.T, what string, pid int) {
	t.Helper()
	for start := time.Now(); !dead(pid); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > hangBound {
			t.Fatalf("%s (pid %d) is still alive", what, pid)
		}
	}
}

// killGroupAtCleanup kills, when the test ends, whatever a hook left in
// its group, so that no test leaves processes behind.
func killGroupAtCleanup(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		if pid, ok := readPid(pidFile); ok {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func preEvent(dir string) PreToolCallEvent {
	return PreToolCallEvent{SessionID: "s1", Cwd: dir, Tool: "bash", Input: map[string]any{"command": "ls"}}
}

func TestNilAndEmptyRunnerDoNothing(t *testing.T) {
	ctx := context.Background()
	for _, r := range []*Runner{nil, {}, {PreToolCallLines: []string{"", "  "}}} {
		if denied, reason := r.PreToolCall(ctx, PreToolCallEvent{Tool: "bash"}); denied || reason != "" {
			t.Errorf("%+v: PreToolCall = %v, %q; want allow", r, denied, reason)
		}
		if got := r.PostAsk(ctx, PostAskEvent{Answer: "a"}); got != "a" {
			t.Errorf("%+v: PostAsk = %q; want the answer kept", r, got)
		}
		if n := r.Count(); n != 0 {
			t.Errorf("%+v: Count = %d; want 0", r, n)
		}
	}
}

func TestCount(t *testing.T) {
	r := &Runner{PreToolCallLines: []string{"a", "b", " "}, PostAskLines: []string{"c"}}
	if n := r.Count(); n != 3 {
		t.Fatalf("Count = %d; want 3", n)
	}
}

func TestAllowWithNoOutput(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{script(t, dir, "ok.sh", "cat >/dev/null; exit 0")}, Log: log}
	within(t, func() {
		if denied, reason := r.PreToolCall(context.Background(), preEvent(dir)); denied || reason != "" {
			t.Errorf("PreToolCall = %v, %q; want allow", denied, reason)
		}
	})
	logs.empty(t)
}

func TestDenyWithReasonAndTheEventRead(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{script(t, dir, "deny.sh", `cat > event.json
echo '{"decision":"deny","reason":"no rm here"}'`)}, Log: log}
	e := PreToolCallEvent{SessionID: "sess-42", Cwd: dir, Tool: "bash", Input: map[string]any{
		"command": "rm -rf / < x && y",
		"timeout": 5.0,
		"nested":  map[string]any{"list": []any{"a", 1.0}},
	}}
	within(t, func() {
		denied, reason := r.PreToolCall(context.Background(), e)
		if !denied || reason != "no rm here" {
			t.Errorf("PreToolCall = %v, %q; want deny, %q", denied, reason, "no rm here")
		}
	})
	logs.empty(t)

	raw, err := os.ReadFile(filepath.Join(dir, "event.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(raw, []byte("}\n")) || bytes.Count(raw, []byte("\n")) != 1 {
		t.Errorf("stdin is not one JSON object and a newline: %q", raw)
	}
	if !bytes.Contains(raw, []byte(`< x && y`)) {
		t.Errorf("stdin escaped the command's HTML characters: %q", raw)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("stdin is not JSON: %v: %q", err, raw)
	}
	want := map[string]any{
		"event":     "preToolCall",
		"sessionId": "sess-42",
		"cwd":       dir,
		"tool":      "bash",
		"input":     e.Input,
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("the hook read\n%s\nwant\n%s", gotJSON, wantJSON)
	}
}

func TestDenyWithoutReason(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo '{"decision":"deny"}'`}}
	within(t, func() {
		denied, reason := r.PreToolCall(context.Background(), preEvent(dir))
		if !denied || reason != "no reason given" {
			t.Errorf("PreToolCall = %v, %q; want deny, %q", denied, reason, "no reason given")
		}
	})
}

func TestNilInputIsAnObject(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{"cat > event.json"}}
	within(t, func() { r.PreToolCall(context.Background(), PreToolCallEvent{Cwd: dir, Tool: "read"}) })
	raw, err := os.ReadFile(filepath.Join(dir, "event.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"input":{}`)) {
		t.Errorf("want an empty input object, got %q", raw)
	}
}

func TestDenyStopsLaterHooks(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{
		"touch first",
		`echo '{"decision":"deny","reason":"second says no"}'`,
		"touch third",
	}}
	within(t, func() {
		denied, reason := r.PreToolCall(context.Background(), preEvent(dir))
		if !denied || reason != "second says no" {
			t.Errorf("PreToolCall = %v, %q; want the second hook's deny", denied, reason)
		}
	})
	if !exists(filepath.Join(dir, "first")) {
		t.Error("the first hook did not run")
	}
	if exists(filepath.Join(dir, "third")) {
		t.Error("a hook after the deny ran")
	}
}

func TestOtherOutputAllows(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{
		`echo '{"decision":"allow","reason":"fine"}'`,
		`echo '[1, 2]'`,
		`echo '"deny"'`,
		`printf '  \n\t\n'`,
	}, Log: log}
	within(t, func() {
		if denied, reason := r.PreToolCall(context.Background(), preEvent(dir)); denied {
			t.Errorf("PreToolCall = %v, %q; want allow", denied, reason)
		}
	})
	logs.empty(t)
}

func TestExitNonZeroWarnsAndAllows(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{script(t, dir, "check.sh", `echo '{"decision":"deny","reason":"x"}'
echo "first line" >&2
echo "it went wrong" >&2
exit 1`)}, Log: log}
	within(t, func() {
		if denied, reason := r.PreToolCall(context.Background(), preEvent(dir)); denied {
			t.Errorf("PreToolCall = %v, %q; want allow", denied, reason)
		}
	})
	logs.only(t, "WARN", "🪝 preToolCall hook ./check.sh: exited with status 1: it went wrong")
}

func TestExitNonZeroWithoutStderr(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{"exit 3"}, Log: log}
	within(t, func() { r.PreToolCall(context.Background(), preEvent(dir)) })
	logs.only(t, "WARN", "🪝 preToolCall hook exit 3: exited with status 3")
}

func TestAFailedHookDoesNotStopTheNext(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{"false", `echo '{"decision":"deny","reason":"r"}'`}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), preEvent(dir)); !denied {
			t.Error("the hook after a failed one did not deny")
		}
	})
	logs.only(t, "WARN", "🪝 preToolCall hook false: exited with status 1")
}

func TestMissingCwdWarnsAndAllows(t *testing.T) {
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo '{"decision":"deny"}'`}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), preEvent(filepath.Join(t.TempDir(), "gone"))); denied {
			t.Error("a hook that could not start denied")
		}
	})
	lines := logs.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "🪝 preToolCall hook echo") || !strings.Contains(lines[0], "cannot start") {
		t.Fatalf("want one Warn line about the start, got %q", lines)
	}
}

func TestMissingBashWarnsAndAllows(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo '{"decision":"deny"}'`}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), preEvent(t.TempDir())); denied {
			t.Error("a hook that could not start denied")
		}
	})
	logs.only(t, "WARN", "🪝 preToolCall hook echo '{\"decision\":\"deny\"}': cannot start: "+procs.ErrNoBash.Error())
}

// groupScript writes its shell's pid to "pid" and a background
// grandchild's to "pid2", then waits for the grandchild.
const groupScript = `echo $$ > pid.tmp && mv pid.tmp pid
sleep 1000 & echo $! > pid2.tmp && mv pid2.tmp pid2
wait`

func TestTimeoutKillsTheGroupWarnsAndAllows(t *testing.T) {
	// The hook must have written both pids before the timeout kills it; on
	// a machine too loaded for that, the timeout is doubled and the test
	// tried again.
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		if timeout > hangBound {
			t.Fatal("the hook never got to write its pids")
		}
		dir := t.TempDir()
		log, logs := newLog()
		r := &Runner{PreToolCallLines: []string{script(t, dir, "slow.sh", `echo '{"decision":"deny"}'
`+groupScript)}, Timeout: timeout, Log: log}
		killGroupAtCleanup(t, filepath.Join(dir, "pid"))
		within(t, func() {
			if denied, reason := r.PreToolCall(context.Background(), preEvent(dir)); denied {
				t.Errorf("PreToolCall = %v, %q; want allow", denied, reason)
			}
		})
		logs.only(t, "WARN", "🪝 preToolCall hook ./slow.sh: timed out after "+formatDuration(timeout))
		pid, ok1 := readPid(filepath.Join(dir, "pid"))
		pid2, ok2 := readPid(filepath.Join(dir, "pid2"))
		if !ok1 || !ok2 {
			continue
		}
		assertDead(t, "the hook", pid)
		assertDead(t, "the hook's background child", pid2)
		return
	}
}

func TestTimeoutMessageUsesDefault(t *testing.T) {
	if got := (&Runner{}).timeout(); got != 10*time.Second {
		t.Fatalf("default timeout = %s; want 10s", got)
	}
	if got := formatDuration(10 * time.Second); got != "10s" {
		t.Fatalf("formatDuration(10s) = %q", got)
	}
	if got := formatDuration(90 * time.Second); got != "90s" {
		t.Fatalf("formatDuration(90s) = %q", got)
	}
}

// cancelMidHook starts call on a context, waits until the hook it runs has
// written its pids (groupScript), cancels, and checks that call returns,
// that the hook's group is dead, that no later hook ran, and that nothing
// was logged of the cancelled hook.
func cancelMidHook(t *testing.T, dir string, logs *logBuf, call func(ctx context.Context)) {
	t.Helper()
	killGroupAtCleanup(t, filepath.Join(dir, "pid"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); call(ctx) }()
	var pid, pid2 int
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var ok1, ok2 bool
		pid, ok1 = readPid(filepath.Join(dir, "pid"))
		pid2, ok2 = readPid(filepath.Join(dir, "pid2"))
		if ok1 && ok2 {
			break
		}
		if time.Since(start) > hangBound {
			cancel()
			<-done
			t.Fatal("the hook never wrote its pids")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatalf("still running %s after the cancel", hangBound)
	}
	assertDead(t, "the hook", pid)
	assertDead(t, "the hook's background child", pid2)
	if exists(filepath.Join(dir, "later")) {
		t.Error("a hook after the cancel ran")
	}
	for _, line := range logs.lines() {
		if strings.Contains(line, "hang.sh") {
			t.Errorf("the cancelled hook was logged: %q", line)
		}
	}
}

func TestCancelPreToolCallKillsTheGroupAndLogsNothing(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{PreToolCallLines: []string{script(t, dir, "hang.sh", groupScript), "touch later"}, Timeout: time.Minute, Log: log}
	cancelMidHook(t, dir, logs, func(ctx context.Context) {
		if denied, reason := r.PreToolCall(ctx, preEvent(dir)); denied || reason != "" {
			t.Errorf("PreToolCall = %v, %q; want allow", denied, reason)
		}
	})
	logs.empty(t)
}

func TestCancelPostAskKillsTheGroupAndLogsNothing(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{PostAskLines: []string{
		`echo '{"answer":"first"}'`,
		script(t, dir, "hang.sh", groupScript),
		"touch later",
	}, Timeout: time.Minute, Log: log}
	cancelMidHook(t, dir, logs, func(ctx context.Context) {
		if got := r.PostAsk(ctx, postEvent(dir)); got != "first" {
			t.Errorf("PostAsk = %q; want the answer as it stood, %q", got, "first")
		}
	})
	// The first hook's replacement was logged before the cancel, and
	// nothing after it.
	logs.only(t, "INFO", `🪝 postAsk: echo '{"answer":"first"}' replaced the answer`)
}

func TestCancelledContextRunsNothing(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{"touch ran"}, PostAskLines: []string{"touch ran"}, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, func() {
		if denied, _ := r.PreToolCall(ctx, preEvent(dir)); denied {
			t.Error("PreToolCall denied on a cancelled context")
		}
		if got := r.PostAsk(ctx, PostAskEvent{Cwd: dir, Answer: "a"}); got != "a" {
			t.Errorf("PostAsk = %q; want the answer kept", got)
		}
	})
	if exists(filepath.Join(dir, "ran")) {
		t.Error("a hook ran on a cancelled context")
	}
	logs.empty(t)
}

func TestInvalidJSONWarnsAndAllows(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{script(t, dir, "chatty.sh", `echo "  I think this is fine  "`)}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), preEvent(dir)); denied {
			t.Error("a hook printing invalid JSON denied")
		}
	})
	logs.only(t, "WARN", "🪝 preToolCall hook ./chatty.sh: printed invalid JSON: I think this is fine")
}

func TestInvalidJSONIsQuotedShortOnOneLine(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	long := strings.Repeat("é", 300) // 600 bytes: the cut falls inside no character
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{"echo 'line one'\necho " + long}, Log: log}
	within(t, func() { r.PreToolCall(context.Background(), preEvent(dir)) })
	want := `🪝 preToolCall hook echo 'line one'\necho ` + long + `: printed invalid JSON: line one\n` + strings.Repeat("é", (200-len("line one\n"))/2)
	logs.only(t, "WARN", want)
}

func TestTooMuchOutputWarnsAndAllows(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo '{"decision":"deny"}'; head -c 1000000 /dev/zero | tr '\0' ' '; head -c 1000000 /dev/zero >&2`}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), preEvent(dir)); denied {
			t.Error("a hook printing too much denied")
		}
	})
	logs.only(t, "WARN", "🪝 preToolCall hook "+r.PreToolCallLines[0]+": printed more than 64 KiB")
}

func TestGrandchildHoldingStdoutDoesNotHang(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo $$ > pid; sleep 1000 & echo '{"decision":"deny","reason":"left a child"}'`}}
	killGroupAtCleanup(t, filepath.Join(dir, "pid"))
	within(t, func() {
		if denied, reason := r.PreToolCall(context.Background(), preEvent(dir)); !denied || reason != "left a child" {
			t.Errorf("PreToolCall = %v, %q; want the deny", denied, reason)
		}
	})
}

func TestLargeInput(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", 4<<20)
	e := PreToolCallEvent{Cwd: dir, Tool: "write", Input: map[string]any{"content": big}}
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{
		"exit 0",       // never reads its stdin
		"wc -c > size", // reads it all
	}, Log: log}
	within(t, func() {
		if denied, _ := r.PreToolCall(context.Background(), e); denied {
			t.Error("denied")
		}
	})
	logs.empty(t)
	want, _ := encode(preToolCallWire{Event: "preToolCall", Tool: "write", Cwd: dir, Input: e.Input})
	b, err := os.ReadFile(filepath.Join(dir, "size"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(len(want)) {
		t.Errorf("the hook read %s bytes; want %d", got, len(want))
	}
}

func TestCwdAndSessionMark(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`pwd -P > where; printf '%s' "$MM_SESSION_ID" > sid`}}
	within(t, func() {
		r.PreToolCall(context.Background(), PreToolCallEvent{SessionID: "sess-7", Cwd: dir, Tool: "bash"})
	})
	where, err := os.ReadFile(filepath.Join(dir, "where"))
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(where)); got != real {
		t.Errorf("the hook ran in %q; want %q", got, real)
	}
	sid, err := os.ReadFile(filepath.Join(dir, "sid"))
	if err != nil {
		t.Fatal(err)
	}
	if string(sid) != "sess-7" {
		t.Errorf("MM_SESSION_ID = %q; want %q", sid, "sess-7")
	}
}

func TestOwnProcessGroup(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Timeout: testwait.Hang, PreToolCallLines: []string{`echo $$ > pid; read -r _ _ _ _ pgid _ < /proc/$$/stat; echo "$pgid" > pgid`}}
	within(t, func() { r.PreToolCall(context.Background(), preEvent(dir)) })
	pid, ok := readPid(filepath.Join(dir, "pid"))
	if !ok {
		t.Fatal("no pid")
	}
	b, err := os.ReadFile(filepath.Join(dir, "pgid"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(pid) {
		t.Errorf("the hook's group is %q; want its own, %d", got, pid)
	}
}

func postEvent(dir string) PostAskEvent {
	return PostAskEvent{SessionID: "s1", Cwd: dir, Agent: "reviewer", Question: "is it ok?", Answer: "yes"}
}

func TestPostAskReplacesTheAnswer(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{script(t, dir, "redact.sh", `cat > event.json
echo '{"answer":"yes, with a \"quote\" and\nanother line"}'`)}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "yes, with a \"quote\" and\nanother line" {
			t.Errorf("PostAsk = %q; want the hook's answer", got)
		}
	})
	logs.only(t, "INFO", "🪝 postAsk: ./redact.sh replaced the answer")

	raw, err := os.ReadFile(filepath.Join(dir, "event.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("stdin is not JSON: %v: %q", err, raw)
	}
	want := map[string]any{"event": "postAsk", "sessionId": "s1", "cwd": dir, "agent": "reviewer", "question": "is it ok?", "answer": "yes"}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("the hook read\n%s\nwant\n%s", gotJSON, wantJSON)
	}
}

func TestPostAskChains(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{
		`echo '{"answer":"first"}'`,
		`in=$(cat); case "$in" in *'"answer":"first"'*) echo '{"answer":"second saw first"}';; *) echo '{"answer":"second saw something else"}';; esac`,
		`echo '{"answer":null}'`,
		`true`,
	}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "second saw first" {
			t.Errorf("PostAsk = %q; want %q", got, "second saw first")
		}
	})
	lines := logs.lines()
	if len(lines) != 2 {
		t.Fatalf("want two Info lines, got %q", lines)
	}
	for i, line := range lines {
		if want := "msg=" + strconv.Quote("🪝 postAsk: "+r.PostAskLines[i]+" replaced the answer"); !strings.Contains(line, "level=INFO") || !strings.Contains(line, want) {
			t.Errorf("line %d = %q; want %s", i, line, want)
		}
	}
}

func TestPostAskSameAnswerIsNoReplacement(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{`echo '{"answer":"yes"}'`}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "yes" {
			t.Errorf("PostAsk = %q", got)
		}
	})
	logs.empty(t)
}

func TestPostAskInvalidOutputKeepsTheAnswer(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{script(t, dir, "x.sh", `echo 'answer: no'`)}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "yes" {
			t.Errorf("PostAsk = %q; want the answer kept", got)
		}
	})
	logs.only(t, "WARN", "🪝 postAsk hook ./x.sh: printed invalid JSON: answer: no")
}

func TestPostAskNonStringAnswerKeepsTheAnswer(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{`echo '{"answer":42}'`}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "yes" {
			t.Errorf("PostAsk = %q; want the answer kept", got)
		}
	})
	logs.only(t, "WARN", `🪝 postAsk hook echo '{"answer":42}': printed an answer that is not a string: 42`)
}

func TestPostAskFailureKeepsTheAnswer(t *testing.T) {
	dir := t.TempDir()
	log, logs := newLog()
	r := &Runner{Timeout: testwait.Hang, PostAskLines: []string{`echo '{"answer":"no"}'; echo broken >&2; exit 2`}, Log: log}
	within(t, func() {
		if got := r.PostAsk(context.Background(), postEvent(dir)); got != "yes" {
			t.Errorf("PostAsk = %q; want the answer kept", got)
		}
	})
	logs.only(t, "WARN", "🪝 postAsk hook "+r.PostAskLines[0]+": exited with status 2: broken")
}

func TestConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{
		Timeout:          testwait.Hang,
		PreToolCallLines: []string{`in=$(cat); case "$in" in *'"tool":"deny-me"'*) echo '{"decision":"deny","reason":"asked"}';; esac`},
		PostAskLines:     []string{`in=$(cat); echo "{\"answer\":\"seen ${#in}\"}"`},
	}
	var wg sync.WaitGroup
	within(t, func() {
		for i := range 8 {
			wg.Go(func() {
				tool := "bash"
				if i%2 == 0 {
					tool = "deny-me"
				}
				denied, _ := r.PreToolCall(context.Background(), PreToolCallEvent{Cwd: dir, Tool: tool})
				if denied != (i%2 == 0) {
					t.Errorf("call %d (%s): denied = %v", i, tool, denied)
				}
				if got := r.PostAsk(context.Background(), PostAskEvent{Cwd: dir, Answer: "a"}); !strings.HasPrefix(got, "seen ") {
					t.Errorf("call %d: PostAsk = %q", i, got)
				}
			})
		}
		wg.Wait()
	})
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain ./x.sh":  "plain ./x.sh",
		"a\nb\r\tc":     `a\nb\r\tc`,
		"esc\x1b[31m":   `esc\x1b[31m`,
		"bad\xffutf8 é": "bad\uFFFDutf8 é",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q; want %q", in, got, want)
		}
	}
}
