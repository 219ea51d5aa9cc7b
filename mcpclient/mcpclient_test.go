package mcpclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/mmbuild"
	"github.com/mm-agent/mm/internal/procs"
	"github.com/mm-agent/mm/internal/syncbuf"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/mcpclient/internal/testtools"
	"github.com/mm-agent/mm/mcpclient/mcptest"
)

// testServer is the stdio test server, built once for all tests.
var testServer string

// hangDeadline only detects hangs: nothing here asserts how fast anything is.
const hangDeadline = testwait.Hang

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpclient-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testServer = filepath.Join(dir, "testserver")
	if err := mmbuild.Build(testServer, "github.com/mm-agent/mm/mcpclient/internal/testserver"); err != nil {
		fmt.Fprintf(os.Stderr, "building the test server: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// recorder keeps what a Sessions reports.
type recorder struct {
	mu       sync.Mutex
	changes  int
	warnings []string
}

func (r *recorder) onChange() {
	r.mu.Lock()
	r.changes++
	r.mu.Unlock()
}

func (r *recorder) onWarning(w string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, w)
	r.mu.Unlock()
}

func (r *recorder) Changes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changes
}

func (r *recorder) Warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

var sessions atomic.Int64

// newSessionID is unique to the test, the run (-count) and the test process,
// so that the processes it marks are the test's own, even when several test
// binaries run at once.
func newSessionID(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), sessions.Add(1))
}

// connect connects to servers for the test, and closes at its end.
func connect(t *testing.T, servers []Server, cwd, sessionID string) (*Sessions, *recorder, *syncbuf.Buffer) {
	t.Helper()
	rec := &recorder{}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := Connect(servers, cwd, sessionID, log, rec.onChange, rec.onWarning)
	t.Cleanup(s.Close)
	return s, rec, logs
}

func stdio(name string, args ...string) Server {
	return Server{Name: name, Command: testServer, Args: args}
}

// kill kills the process pid, as a crash would.
func kill(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds; the deadline only detects a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func toolsByName(s *Sessions) map[string]Tool {
	m := map[string]Tool{}
	for _, t := range s.Tools() {
		m[t.Name] = t
	}
	return m
}

func waitTool(t *testing.T, s *Sessions, name string) Tool {
	t.Helper()
	waitFor(t, "tool "+name, func() bool { _, ok := toolsByName(s)[name]; return ok })
	return toolsByName(s)[name]
}

func call(t *testing.T, s *Sessions, name string, args map[string]any) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	res, err := s.Call(ctx, name, args)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

// callText calls a tool that answers with one text.
func callText(t *testing.T, s *Sessions, name string, args map[string]any) string {
	t.Helper()
	res := call(t, s, name, args)
	if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("%s: got %+v, want one text", name, res)
	}
	return res.Content[0].Text
}

func callPid(t *testing.T, s *Sessions, name string) int {
	t.Helper()
	pid, err := strconv.Atoi(callText(t, s, name, nil))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// alive says whether pid is a living process. A killed orphan may stay a
// zombie until init reaps it, and a zombie is dead.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// marked lists the living processes that carry the mark of the session.
func marked(sessionID string) []int {
	mark := []byte(procs.SessionEnv(sessionID))
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, mark) }) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestToolsListed(t *testing.T) {
	srv := stdio("fs")
	srv.Ask = true
	s, rec, _ := connect(t, []Server{srv}, t.TempDir(), newSessionID(t))

	echo := waitTool(t, s, "mcp__fs__echo")
	if !echo.ReadOnly || echo.Title != "Echo" || echo.Server != "fs" || echo.Remote != "echo" || !echo.Ask || echo.Description != "echoes its text" {
		t.Errorf("echo: %+v", echo)
	}
	tools := s.Tools()
	if !slices.IsSortedFunc(tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("tools are not sorted by name")
	}
	names := map[string]bool{}
	for _, tool := range tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"echo", "add", "image", "fail", "slow", "pid"} {
		if !names["mcp__fs__"+want] {
			t.Errorf("no tool mcp__fs__%s in %v", want, names)
		}
	}

	add := toolsByName(s)["mcp__fs__add"]
	if add.ReadOnly {
		t.Error("add is read-only")
	}
	var schema struct {
		Type       string                       `json:"type"`
		Properties map[string]map[string]string `json:"properties"`
	}
	if err := json.Unmarshal(add.Schema, &schema); err != nil {
		t.Fatalf("add's schema %s: %v", add.Schema, err)
	}
	if schema.Type != "object" || schema.Properties["a"]["type"] != "number" || schema.Properties["b"]["type"] != "number" {
		t.Errorf("add's schema: %s", add.Schema)
	}
	if rec.Changes() == 0 {
		t.Error("onChange was not called")
	}
	if w := rec.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
}

func TestCall(t *testing.T) {
	cwd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := stdio("fs")
	srv.Env = map[string]string{"MCPCLIENT_TEST_VAR": "from the config"}
	session := newSessionID(t)
	s, _, _ := connect(t, []Server{srv}, cwd, session)
	waitTool(t, s, "mcp__fs__echo")

	if got := callText(t, s, "mcp__fs__echo", map[string]any{"text": "hello"}); got != "hello" {
		t.Errorf("echo: %q", got)
	}
	if got := callText(t, s, "mcp__fs__add", map[string]any{"a": 2, "b": 3}); got != "5" {
		t.Errorf("add: %q", got)
	}

	img := call(t, s, "mcp__fs__image", nil)
	want := []Content{
		{Type: "text", Text: "a pixel"},
		{Type: "image", MIMEType: "image/png", Data: base64.StdEncoding.EncodeToString(testtools.PNGBytes)},
	}
	if img.IsError || !slices.Equal(img.Content, want) {
		t.Errorf("image: got %+v, want %+v", img, want)
	}

	res := call(t, s, "mcp__fs__resource", nil)
	want = []Content{
		{Type: "resource", URI: "file:///a.txt", MIMEType: "text/plain", Text: "hello"},
		{Type: "resource", URI: "file:///b.bin", MIMEType: "application/octet-stream", Blob: base64.StdEncoding.EncodeToString([]byte{0, 1, 2})},
	}
	if res.IsError || !slices.Equal(res.Content, want) {
		t.Errorf("resource: got %+v, want %+v", res, want)
	}

	fail := call(t, s, "mcp__fs__fail", nil)
	if !fail.IsError || len(fail.Content) != 1 || !strings.Contains(fail.Content[0].Text, "it failed on purpose") {
		t.Errorf("fail: %+v", fail)
	}

	if got := callText(t, s, "mcp__fs__cwd", nil); got != cwd {
		t.Errorf("cwd: %q, want %q", got, cwd)
	}
	if got := callText(t, s, "mcp__fs__env", map[string]any{"name": "MCPCLIENT_TEST_VAR"}); got != "from the config" {
		t.Errorf("the server's env: %q", got)
	}
	if got := callText(t, s, "mcp__fs__env", map[string]any{"name": "MM_SESSION_ID"}); got != session {
		t.Errorf("MM_SESSION_ID: %q", got)
	}

	// Arguments the tool's schema rejects are the tool's error, for the
	// model to read and correct.
	bad, err := s.Call(context.Background(), "mcp__fs__add", map[string]any{"a": "two"})
	if err == nil && !bad.IsError {
		t.Errorf("add with a string: %+v", bad)
	}

	if _, err := s.Call(context.Background(), "mcp__fs__nope", nil); err == nil || !strings.Contains(err.Error(), "mcp__fs__nope") {
		t.Errorf("unknown tool: %v", err)
	}
}

func TestSessionsIsolated(t *testing.T) {
	a, _, _ := connect(t, []Server{stdio("alpha")}, t.TempDir(), newSessionID(t))
	idB := newSessionID(t)
	b, _, _ := connect(t, []Server{stdio("beta")}, t.TempDir(), idB)
	waitTool(t, a, "mcp__alpha__pid")
	waitTool(t, b, "mcp__beta__pid")
	for _, tool := range a.Tools() {
		if tool.Server != "alpha" || !strings.HasPrefix(tool.Name, "mcp__alpha__") {
			t.Errorf("a sees %+v", tool)
		}
	}
	for _, tool := range b.Tools() {
		if tool.Server != "beta" || !strings.HasPrefix(tool.Name, "mcp__beta__") {
			t.Errorf("b sees %+v", tool)
		}
	}
	if _, err := a.Call(context.Background(), "mcp__beta__pid", nil); err == nil {
		t.Error("a called b's tool")
	}
	if callPid(t, a, "mcp__alpha__pid") == callPid(t, b, "mcp__beta__pid") {
		t.Error("the sessions share a process")
	}
	if got := callText(t, b, "mcp__beta__env", map[string]any{"name": "MM_SESSION_ID"}); got != idB {
		t.Errorf("b's server is marked %q", got)
	}
}

func TestStartFailure(t *testing.T) {
	s, rec, _ := connect(t, []Server{
		{Name: "nope", Command: "mm-no-such-command-mcpclient"},
		{Name: "empty"},
		stdio("ok"),
	}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__ok__echo")
	waitFor(t, "two warnings", func() bool { return len(rec.Warnings()) == 2 })
	w := rec.Warnings()
	slices.Sort(w)
	want := []string{
		`MCP server "empty" did not start: it has neither a command nor a URL`,
		`MCP server "nope" did not start: exec: "mm-no-such-command-mcpclient": executable file not found in $PATH`,
	}
	if !slices.Equal(w, want) {
		t.Errorf("warnings:\n%q\nwant\n%q", w, want)
	}
	for _, tool := range s.Tools() {
		if tool.Server != "ok" {
			t.Errorf("tool of a server that did not start: %+v", tool)
		}
	}
	if _, err := s.Call(context.Background(), "mcp__nope__echo", nil); err == nil || !strings.Contains(err.Error(), `"nope" is not running`) {
		t.Errorf("calling a tool of the server that did not start: %v", err)
	}
	if got := callText(t, s, "mcp__ok__echo", map[string]any{"text": "fine"}); got != "fine" {
		t.Errorf("echo: %q", got)
	}
}

func TestCrash(t *testing.T) {
	s, rec, _ := connect(t, []Server{stdio("fs"), stdio("other")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__pid")
	waitTool(t, s, "mcp__other__pid")
	pid := callPid(t, s, "mcp__fs__pid")
	before := rec.Changes()
	kill(t, pid)
	waitFor(t, "the crash warning", func() bool { return len(rec.Warnings()) > 0 })
	if w := rec.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], `MCP server "fs" stopped`) {
		t.Errorf("warnings: %q", w)
	}
	for _, tool := range s.Tools() {
		if tool.Server == "fs" {
			t.Errorf("tool of the dead server: %s", tool.Name)
		}
	}
	if rec.Changes() == before {
		t.Error("onChange was not called")
	}
	if _, err := s.Call(context.Background(), "mcp__fs__echo", map[string]any{"text": "x"}); err == nil || !strings.Contains(err.Error(), `"fs" is not running`) {
		t.Errorf("calling the dead server: %v", err)
	}
	if got := callText(t, s, "mcp__other__echo", map[string]any{"text": "still here"}); got != "still here" {
		t.Errorf("the other server: %q", got)
	}
}

func TestCrashDuringCall(t *testing.T) {
	s, rec, _ := connect(t, []Server{stdio("fs")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__slow")
	pid := callPid(t, s, "mcp__fs__pid")
	started := filepath.Join(t.TempDir(), "started")
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "mcp__fs__slow", map[string]any{"seconds": 3600, "started": started})
		errc <- err
	}()
	waitFor(t, "slow to start", func() bool { _, err := os.Stat(started); return err == nil })
	kill(t, pid)
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), `"fs" stopped during the call`) {
			t.Errorf("call: %v", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the call outlived its server")
	}
	waitFor(t, "the crash warning", func() bool { return len(rec.Warnings()) > 0 })
}

func TestCancel(t *testing.T) {
	s, _, _ := connect(t, []Server{stdio("fs")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__slow")
	dir := t.TempDir()
	started, cancelled := filepath.Join(dir, "started"), filepath.Join(dir, "cancelled")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, "mcp__fs__slow", map[string]any{"seconds": 3600, "started": started, "cancelled": cancelled})
		errc <- err
	}()
	waitFor(t, "slow to start", func() bool { _, err := os.Stat(started); return err == nil })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call: %v, want context.Canceled", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the cancelled call did not return")
	}
	waitFor(t, "the server to see the cancellation", func() bool { _, err := os.Stat(cancelled); return err == nil })
	if got := callText(t, s, "mcp__fs__echo", map[string]any{"text": "after"}); got != "after" {
		t.Errorf("echo after the cancellation: %q", got)
	}
}

func TestClose(t *testing.T) {
	session := newSessionID(t)
	s, rec, _ := connect(t, []Server{stdio("fs"), stdio("two")}, t.TempDir(), session)
	waitTool(t, s, "mcp__fs__spawn")
	waitTool(t, s, "mcp__two__slow")
	pid := callPid(t, s, "mcp__fs__pid")
	child := callPid(t, s, "mcp__fs__spawn")
	if !alive(pid) || !alive(child) {
		t.Fatal("the server or its child is not running")
	}

	// A call in flight when the session closes must not hold Close.
	errc := make(chan error, 1)
	started := filepath.Join(t.TempDir(), "started")
	go func() {
		_, err := s.Call(context.Background(), "mcp__two__slow", map[string]any{"seconds": 3600, "started": started})
		errc <- err
	}()
	waitFor(t, "slow to start", func() bool { _, err := os.Stat(started); return err == nil })

	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangDeadline):
		t.Fatal("Close hangs")
	}
	if alive(pid) || alive(child) {
		t.Errorf("left running: server %v, child %v", alive(pid), alive(child))
	}
	if left := marked(session); len(left) > 0 {
		t.Errorf("processes of the session left: %v", left)
	}
	if err := <-errc; err == nil {
		t.Error("the call in flight succeeded")
	}
	if tools := s.Tools(); len(tools) != 0 {
		t.Errorf("tools after Close: %v", tools)
	}
	if _, err := s.Call(context.Background(), "mcp__fs__echo", map[string]any{"text": "x"}); err == nil {
		t.Error("a call after Close succeeded")
	}
	if w := rec.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
	s.Close() // a second Close is harmless
	goleak.VerifyNone(t)
}

func TestConnectTimeout(t *testing.T) {
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = 500 * time.Millisecond
	session := newSessionID(t)
	s, rec, _ := connect(t, []Server{stdio("hang", "hang")}, t.TempDir(), session)
	waitFor(t, "the warning", func() bool { return len(rec.Warnings()) > 0 })
	want := `MCP server "hang" did not start: it did not answer within 500ms`
	if w := rec.Warnings(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings: %q, want %q", w, want)
	}
	waitFor(t, "the hanging server to be killed", func() bool { return len(marked(session)) == 0 })
	s.Close()
}

// TestCloseWhileConnecting: Connect returns while a server has not answered
// (this one never will), and Close does not wait for the attempt's time
// limit.
func TestCloseWhileConnecting(t *testing.T) {
	// The attempt's limit is far past the hang bound, so that a Close that
	// waited for it would be caught.
	defer func(d time.Duration) { connectTimeout = d }(connectTimeout)
	connectTimeout = time.Hour
	session := newSessionID(t)
	s, rec, _ := connect(t, []Server{stdio("hang", "hang")}, t.TempDir(), session)
	waitFor(t, "the server to start", func() bool { return len(marked(session)) > 0 })
	if tools := s.Tools(); len(tools) != 0 {
		t.Errorf("tools: %v", tools)
	}
	if _, err := s.Call(context.Background(), "mcp__hang__echo", nil); err == nil || !strings.Contains(err.Error(), "still starting") {
		t.Errorf("calling a starting server: %v", err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangDeadline):
		t.Fatal("Close waits for the connection attempt")
	}
	if left := marked(session); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if w := rec.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
}

func TestToolListChanged(t *testing.T) {
	s, rec, _ := connect(t, []Server{stdio("fs")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__grow")
	if _, ok := toolsByName(s)["mcp__fs__extra"]; ok {
		t.Fatal("extra before grow")
	}
	before := rec.Changes()
	callText(t, s, "mcp__fs__grow", nil)
	waitTool(t, s, "mcp__fs__extra")
	if rec.Changes() == before {
		t.Error("onChange was not called")
	}
	if got := callText(t, s, "mcp__fs__extra", nil); got != "extra" {
		t.Errorf("extra: %q", got)
	}
}

func TestHTTP(t *testing.T) {
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testtools.New() }, nil)
	hs := httptest.NewServer(handler)
	defer hs.Close()

	s, rec, _ := connect(t, []Server{{
		Name:    "web",
		URL:     hs.URL,
		Headers: map[string]string{"Authorization": "Bearer secret"},
	}}, t.TempDir(), newSessionID(t))
	echo := waitTool(t, s, "mcp__web__echo")
	if !echo.ReadOnly {
		t.Errorf("echo: %+v", echo)
	}
	if got := callText(t, s, "mcp__web__echo", map[string]any{"text": "over http"}); got != "over http" {
		t.Errorf("echo: %q", got)
	}
	if got := callText(t, s, "mcp__web__header", map[string]any{"name": "Authorization"}); got != "Bearer secret" {
		t.Errorf("the server got Authorization %q", got)
	}
	img := call(t, s, "mcp__web__image", nil)
	if len(img.Content) != 2 || img.Content[1].Type != "image" {
		t.Errorf("image: %+v", img)
	}
	s.Close()
	if w := rec.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close() // nothing listens there any more
	s, rec, _ := connect(t, []Server{{Name: "gone", URL: url}, stdio("ok")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__ok__echo")
	waitFor(t, "the warning", func() bool { return len(rec.Warnings()) > 0 })
	if w := rec.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], `MCP server "gone" did not start: `) {
		t.Errorf("warnings: %q", w)
	}
}

func TestOddNames(t *testing.T) {
	s, _, _ := connect(t, []Server{stdio("my server.v2")}, t.TempDir(), newSessionID(t))
	odd := waitTool(t, s, "mcp__my_server_v2__odd_name")
	if odd.Remote != "odd.name" || odd.Server != "my server.v2" {
		t.Errorf("odd: %+v", odd)
	}
	if got := callText(t, s, odd.Name, nil); got != "odd" {
		t.Errorf("odd.name: %q", got)
	}
	var long Tool
	for _, tool := range s.Tools() {
		if strings.HasPrefix(tool.Remote, "long_") {
			long = tool
		}
		if len(tool.Name) > 64 {
			t.Errorf("%s is longer than 64", tool.Name)
		}
	}
	if want := ("mcp__my_server_v2__long_" + strings.Repeat("x", 64))[:64]; long.Name != want {
		t.Errorf("long: %q, want %q", long.Name, want)
	}
	if got := callText(t, s, long.Name, nil); got != "long" {
		t.Errorf("the long tool: %q", got)
	}
	// A tool that gives no properties still gets an object schema.
	var schema map[string]any
	if err := json.Unmarshal(odd.Schema, &schema); err != nil || schema["type"] != "object" {
		t.Errorf("odd's schema: %s", odd.Schema)
	}
}

func TestToolName(t *testing.T) {
	for _, c := range []struct{ server, tool, want string }{
		{"fs", "read_file", "mcp__fs__read_file"},
		{"my server.v2", "do.it!", "mcp__my_server_v2__do_it_"},
		{"café", "naïve-tool", "mcp__caf___na_ve-tool"},
		{"s", strings.Repeat("a", 100), "mcp__s__" + strings.Repeat("a", 56)},
	} {
		if got := toolName(c.server, c.tool); got != c.want {
			t.Errorf("toolName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
}

func TestToTool(t *testing.T) {
	got, why := toTool(Server{Name: "s"}, &mcp.Tool{Name: "t", Annotations: &mcp.ToolAnnotations{Title: "From the annotation"}})
	if got.Title != "From the annotation" || string(got.Schema) != string(emptySchema) || why != "" {
		t.Errorf("%+v %q", got, why)
	}
	got, _ = toTool(Server{Name: "s"}, &mcp.Tool{Name: "t", Title: "Own", Annotations: &mcp.ToolAnnotations{Title: "Annotation"}})
	if got.Title != "Own" {
		t.Errorf("title %q, want the tool's own", got.Title)
	}
	got, _ = toTool(Server{Name: "s"}, &mcp.Tool{Name: "t", Description: strings.Repeat("é", maxDescription)})
	if len(got.Description) > maxDescription+len("…") || !strings.HasSuffix(got.Description, "é…") {
		t.Errorf("a long description is %d bytes, ending %q", len(got.Description), got.Description[len(got.Description)-8:])
	}
}

// TestCheckSchema: what no model server takes is refused, with what the
// warning quotes.
func TestCheckSchema(t *testing.T) {
	for _, c := range []struct {
		schema any
		want   string // the schema offered, or "" when refused
		why    string
	}{
		{nil, string(emptySchema), ""},
		{map[string]any{"type": "object"}, `{"type":"object"}`, ""},
		{map[string]any{"type": "object", "properties": map[string]any{}, "required": []any{"a"}}, `{"properties":{},"required":["a"],"type":"object"}`, ""},
		{map[string]any{"type": 5.0}, "", `{"type":5}`},
		{"a string", "", `"a string"`},
		{[]any{}, "", `[]`},
		{map[string]any{}, "", `{}`},
		{map[string]any{"type": "string"}, "", `{"type":"string"}`},
		{map[string]any{"type": "object", "properties": "none"}, "", `{"properties":"none","type":"object"}`},
		{map[string]any{"type": "object", "required": "a"}, "", `{"required":"a","type":"object"}`},
		{map[string]any{"type": 5.0, "description": strings.Repeat("x", 100)}, "", `{"description":"` + strings.Repeat("x", 32) + "…"},
		{map[string]any{"type": "object", "description": strings.Repeat("x", maxSchemaBytes)}, "", "64 KiB, over 64 KiB"},
	} {
		got, why := checkSchema(c.schema)
		if string(got) != c.want || why != c.why {
			t.Errorf("checkSchema(%v) = %s, %q; want %s, %q", c.schema, got, why, c.want, c.why)
		}
	}
}

// TestSameNames: when two tools reduce to one name, the first server in the
// configuration keeps it, whichever listed first.
func TestSameNames(t *testing.T) {
	s := &Sessions{log: slog.New(slog.DiscardHandler), byName: map[string]route{}}
	first := &conn{s: s, srv: Server{Name: "a.b"}}
	second := &conn{s: s, srv: Server{Name: "a_b"}}
	s.conns = []*conn{first, second}
	x, _ := toTool(second.srv, &mcp.Tool{Name: "x"})
	second.tools = []Tool{x}
	s.rebuild()
	if r := s.byName["mcp__a_b__x"]; r.c != second {
		t.Fatal("the only server's tool is not offered")
	}
	x, _ = toTool(first.srv, &mcp.Tool{Name: "x"})
	first.tools = []Tool{x}
	s.rebuild()
	if r := s.byName["mcp__a_b__x"]; r.c != first || len(s.tools) != 1 {
		t.Errorf("the name went to %q; %d tools", r.c.srv.Name, len(s.tools))
	}
}

func TestStderrLogged(t *testing.T) {
	s, _, logs := connect(t, []Server{stdio("fs")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__echo")
	waitFor(t, "the server's stderr in the log", func() bool {
		return strings.Contains(logs.String(), `line="testserver: starting"`)
	})
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Errorf("log: %s", logs.String())
	}
}

// TestInvalidSchemasLeftOut: tools whose input schema no model server
// takes are left out, with one warning for the listing; the good one is
// offered.
func TestInvalidSchemasLeftOut(t *testing.T) {
	s, rec, _ := connect(t, []Server{stdio("bad", "hostile", mcptest.BadSchemas)}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__bad__echo")
	waitFor(t, "the warning", func() bool { return len(rec.Warnings()) > 0 })
	if tools := s.Tools(); len(tools) != 1 {
		t.Errorf("offered: %+v", tools)
	}
	want := `MCP server "bad": 4 tools left out, their input schema is not an object schema a model takes: ` +
		`bad_number ({"type":5}), bad_string ("an object, honestly"), bad_array ([{"type":"object"}]), bad_properties ({"properties":"none","type":"object"})`
	if w := rec.Warnings(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings:\n%q\nwant\n%q", w, want)
	}
	if got := callText(t, s, "mcp__bad__echo", nil); got != "called" {
		t.Errorf("echo: %q", got)
	}
}

// TestMaxTools: a server listing more tools than its MaxTools has its first
// ones offered, and a warning.
func TestMaxTools(t *testing.T) {
	srv := stdio("many", "hostile", mcptest.ManyTools+":1000")
	srv.MaxTools = 10
	s, rec, _ := connect(t, []Server{srv}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__many__t0")
	var names []string
	for _, tool := range s.Tools() {
		names = append(names, tool.Remote)
	}
	slices.Sort(names)
	if want := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"}; !slices.Equal(names, want) {
		t.Errorf("offered %v, want %v", names, want)
	}
	want := `MCP server "many" lists more than 10 tools (mcp.maxTools); only its first 10 are offered`
	waitFor(t, "the warning", func() bool { return len(rec.Warnings()) > 0 })
	if w := rec.Warnings(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings: %q, want %q", w, want)
	}
}

// TestCallTimeout: a call not answered within the server's Timeout is
// cancelled (the server hears of it) and fails, naming the setting.
func TestCallTimeout(t *testing.T) {
	srv := stdio("fs")
	srv.Timeout, srv.TimeoutKey = 500*time.Millisecond, `the timeout of mcp.servers "fs"`
	s, _, _ := connect(t, []Server{srv, stdio("other")}, t.TempDir(), newSessionID(t))
	waitTool(t, s, "mcp__fs__slow")
	waitTool(t, s, "mcp__other__slow")
	dir := t.TempDir()
	cancelled := filepath.Join(dir, "cancelled")
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	start := time.Now()
	_, err := s.Call(ctx, "mcp__fs__slow", map[string]any{"seconds": 3600, "cancelled": cancelled})
	t.Logf("the call ended after %v", time.Since(start))
	want := `MCP server "fs" did not answer the call of "slow" within 500ms (the timeout of mcp.servers "fs"); the call was cancelled`
	if err == nil || err.Error() != want {
		t.Fatalf("call: %v, want %q", err, want)
	}
	waitFor(t, "the server to see the cancellation", func() bool { _, err := os.Stat(cancelled); return err == nil })
	// The server still answers. Its calls have 500 ms too, which a loaded
	// machine can miss for an echo: a timed-out echo is tried again, any
	// other outcome is the verdict.
	echoLate := `MCP server "fs" did not answer the call of "echo" within 500ms (the timeout of mcp.servers "fs"); the call was cancelled`
	for try := 1; ; try++ {
		res, err := s.Call(ctx, "mcp__fs__echo", map[string]any{"text": "after"})
		if err != nil && err.Error() == echoLate {
			t.Logf("echo try %d: %v", try, err)
			continue
		}
		if err != nil || len(res.Content) != 1 || res.Content[0].Text != "after" {
			t.Errorf("echo after the timeout: %+v, %v", res, err)
		}
		break
	}
	// The other server's calls have the default limit: a short call is
	// not cut.
	if got := callText(t, s, "mcp__other__slow", map[string]any{"seconds": 0.7}); got != "slept" {
		t.Errorf("a call of the other server: %q", got)
	}
}

// TestCutTools: a page with more than max tools keeps its first max, and
// loses its cursor; others are left as they are.
func TestCutTools(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string // "" when left as it is
	}{
		{`{"tools":[{"name":"a"},{"name":"b"},{"name":"c"}],"nextCursor":"x"}`, 2, `{"tools":[{"name":"a"},{"name":"b"}]}`},
		{`{"nextCursor":"x", "tools": [ {"name":"a"} , {"name":"b"} ]}`, 1, `{"tools":[ {"name":"a"}]}`},
		{`{"tools":[{"name":"a"},{"name":"b"}]}`, 2, ""},
		{`{"tools":[]}`, 2, ""},
		{`{"tools":"many"}`, 2, ""},
		{`[1,2,3]`, 2, ""},
	} {
		got, ok := cutTools([]byte(c.in), c.max)
		if ok != (c.want != "") || string(got) != c.want {
			t.Errorf("cutTools(%s, %d) = %s, %v; want %s", c.in, c.max, got, ok, c.want)
		}
	}
}
