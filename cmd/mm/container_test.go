//go:build container

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/protocol"
)

// imageUID is the image's default user (Dockerfile).
const imageUID = 10001

// containerScript is the scripted model the config folder holds: a turn
// that has bash write a file in the project and report who it runs as and
// whether it may write its HOME, one that commits, with the identity the
// command gives and without one, and one that tries the walls of mm
// serve's sandbox from inside (mm's config, the container's loopback where
// mm listens, mm's process, a capability).
const containerScript = `
rules:
  - match: "^write$"
    steps:
      - toolCalls:
          - name: bash
            args: {command: "echo made in the container > made.txt && echo uid=$(id -u) && echo home=$HOME && if touch \"$HOME/.probe\" 2>/dev/null; then echo home-writable; else echo home-read-only; fi"}
      - {text: "bash said: {{last_tool_output}}"}
  - match: "^walls$"
    steps:
      - toolCalls:
          - name: bash
            args:
              command: |
                echo capeff=$(sed -n 's/^CapEff:\s*//p' /proc/self/status)
                grep -s provider /home/mm/.config/mm/config.yaml && echo CONFIG-READ
                (exec 3<>/dev/tcp/127.0.0.1/8765) 2>/dev/null && echo LOOPBACK-REACHED
                for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q 'serv[e] -listen' && echo MM-SEEN
                echo walls-done
      - {text: "bash said: {{last_tool_output}}"}
  - match: "^commit$"
    steps:
      - toolCalls:
          - name: bash
            args:
              command: |
                git init -q . && git commit -q --allow-empty -m probe 2>&1 && git log -1 --format='author=%an <%ae> committer=%cn <%ce>'
                env -u GIT_AUTHOR_NAME -u GIT_AUTHOR_EMAIL -u GIT_COMMITTER_NAME -u GIT_COMMITTER_EMAIL git commit -q --allow-empty -m anonymous 2>&1; echo anonymous-exit=$?
      - {text: "bash said: {{last_tool_output}}"}
`

// What the test gives the documented commands: the identity in place of
// $(git config user.name) and user.email, and the token.
const (
	testGitName    = "mm container test"
	testGitEmail   = "mm-container-test@example.com"
	containerToken = "container-serve-token-0123456789"
)

// cfgInside is where the image reads the config from ($HOME/.config/mm).
const cfgInside = "/home/mm/.config/mm"

// containerConfig is the config the test mounts: the scripted model, and,
// as docs/container.md says for mm serve, git's variables in sandbox.env
// (a confined command gets no other variable of mm's).
const containerConfig = `model:
  provider: scripted
  script: ` + cfgInside + `/script.yaml
skills:
  dirs: []
sandbox:
  env: [PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, "LC_*", TERM, TZ, COLORTERM, NO_COLOR, "GIT_AUTHOR_*", "GIT_COMMITTER_*"]
`

// servedOwner is whom the test gives a served project when it runs as
// root: docs/container.md serves a project as its owner, never as root. A
// uid the image does not know, as a user's is.
const servedOwner = 4343

// fixture is one documented command about to run: the block of
// docs/container.md marked for it, a home for its ~ and a project for its
// $PWD, each on the host.
type fixture struct {
	engine, image string
	home, project string
	run           docRun
	wantUID       int // who bash runs as in the container
	wantOwner     int // whose, on the host, the files it writes are: the caller's
}

// containerEngine returns the engine, the image that
// scripts/container-test.sh built and the mode it found the engine in (one
// of containerModes: which of the page's blocks fit), or skips the test.
func containerEngine(t *testing.T) (engine, image, mode string) {
	t.Helper()
	engine, image, mode = os.Getenv("MM_CONTAINER_ENGINE"), os.Getenv("MM_CONTAINER_IMAGE"), os.Getenv("MM_CONTAINER_MODE")
	if engine == "" || image == "" {
		t.Skip("run scripts/container-test.sh: it builds the image and sets MM_CONTAINER_ENGINE, MM_CONTAINER_IMAGE and MM_CONTAINER_MODE")
	}
	if !slices.Contains(containerModes, mode) {
		t.Fatalf("MM_CONTAINER_MODE=%q, want one of %q (scripts/container-test.sh sets it)", mode, containerModes)
	}
	return engine, image, mode
}

// newFixture reads the command marked what for the engine out of
// docs/container.md, with a temporary home and project for its ~ and $PWD,
// and does its mkdir -p. When that made the config folder, the scripted
// model goes there.
func newFixture(t *testing.T, what string) *fixture {
	t.Helper()
	engine, image, mode := containerEngine(t)
	f := &fixture{engine: engine, image: image, home: t.TempDir(), project: t.TempDir(),
		wantUID: os.Getuid(), wantOwner: os.Getuid()}
	if mode == "docker-rootless" {
		f.wantUID = 0 // the container's root, which is the caller on the host
	}
	if what == "serve" && os.Getuid() == 0 && mode != "docker-rootless" {
		// Root serves a user's project, as that user.
		if err := os.Chown(f.project, servedOwner, servedOwner); err != nil {
			t.Fatal(err)
		}
		f.wantUID, f.wantOwner = servedOwner, servedOwner
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.project, &st); err != nil {
		t.Fatal(err)
	}
	env := docEnv{home: f.home, pwd: f.project, uid: os.Getuid(), gid: os.Getgid(), owner: fmt.Sprintf("%d:%d", st.Uid, st.Gid),
		gitName: testGitName, gitEmail: testGitEmail, token: containerToken}
	run, err := docRunFor(readDoc(t, containerDoc), what, mode, env)
	if err != nil {
		t.Fatalf("docs/container.md: %v", err)
	}
	f.run = run
	for _, d := range run.mkdirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfgDir := filepath.Join(f.home, ".config", "mm")
	if _, err := os.Stat(cfgDir); err != nil {
		return f // a command on the embedded defaults
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "script.yaml"), []byte(containerScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(containerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// selinuxEnforcing reports whether the host enforces SELinux, where
// docs/container.md says to add :z to the mounts.
func selinuxEnforcing() bool {
	b, err := os.ReadFile("/sys/fs/selinux/enforce")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// command returns the documented run as the test runs it (docAdapt's
// changes only), in the project, with the block's exports.
func (f *fixture) command(t *testing.T, name string, hostPort int) *exec.Cmd {
	t.Helper()
	args, err := f.run.testArgs(docAdapt{image: f.image, name: name, hostPort: hostPort, token: containerToken, selinux: selinuxEnforcing()})
	if err != nil {
		t.Fatalf("docs/container.md:%d: %v", f.run.block.line, err)
	}
	t.Logf("docs/container.md:%d runs: %s %s", f.run.block.line, f.engine, strings.Join(args, " "))
	cmd := exec.Command(f.engine, args...)
	cmd.Dir = f.project
	cmd.Env = f.run.testEnv()
	return cmd
}

// checkWrite checks the turn of the script's "write": bash ran as the
// caller and wrote made.txt in the project on the host, as the caller;
// its HOME is writable, or read-only where mm serve confines it (only the
// project and its own /tmp are writable then).
func (f *fixture) checkWrite(t *testing.T, text string, confined bool) {
	t.Helper()
	m := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(text)
	switch {
	case m == nil:
		t.Errorf("bash printed no uid=…: %q", text)
	case m[1] == "0" && f.wantUID != 0:
		t.Errorf("the container runs as root")
	case m[1] != fmt.Sprint(f.wantUID):
		t.Errorf("bash ran as uid %s, want %d (rootless podman: --userns=keep-id alone keeps the image's user)", m[1], f.wantUID)
	}
	switch {
	case !strings.Contains(text, "home=/home/mm"):
		t.Errorf("HOME is not /home/mm: %q", text)
	case !confined && !strings.Contains(text, "home-writable"):
		t.Errorf("HOME is not writable by uid %d: %q", f.wantUID, text)
	case confined && !strings.Contains(text, "home-read-only"):
		t.Errorf("a confined command wrote its HOME, outside the project: %q", text)
	}
	made := filepath.Join(f.project, "made.txt")
	data, err := os.ReadFile(made)
	if err != nil {
		t.Fatalf("the file bash wrote is not on the host: %v", err)
	}
	if string(data) != "made in the container\n" {
		t.Errorf("made.txt holds %q", data)
	}
	if fi, err := os.Stat(made); err == nil {
		if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != f.wantOwner {
			t.Errorf("made.txt belongs to uid %d on the host, want %d (rootless docker maps container uids elsewhere: see docs/container.md)", owner, f.wantOwner)
		}
	}
}

// checkCommit checks the turn of the script's "commit": the commit bears
// the identity the command gives, and without it git says so. (A uid the
// image knows, root or its own, may get an identity git makes up from the
// host name, so that half is checked for other uids, the usual case.)
func (f *fixture) checkCommit(t *testing.T, text string) {
	t.Helper()
	id := testGitName + " <" + testGitEmail + ">"
	if want := "author=" + id + " committer=" + id; !strings.Contains(text, want) {
		t.Errorf("the commit does not bear the documented identity (%s): %q", want, text)
	}
	if f.wantUID == 0 || f.wantUID == imageUID {
		return
	}
	if !strings.Contains(text, "Author identity unknown") || regexp.MustCompile(`anonymous-exit=0\b`).MatchString(text) {
		t.Errorf("without an identity, git commit did not fail with git's message: %q", text)
	}
}

// turn asks the prompt in the session and returns the agent's text.
func turn(ctx context.Context, t *testing.T, conn *acptest.Conn, sid acp.SessionId, prompt string) string {
	t.Helper()
	conn.Client.Reset()
	res, err := conn.Ask(ctx, sid, prompt)
	if err != nil {
		t.Fatalf("session/prompt %q: %v", prompt, err)
	}
	text := acptest.Text(conn.Client.Updates(sid))
	t.Logf("%s: stop %s, agent said: %q", prompt, res.StopReason, text)
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("%s: stop reason %s, want end_turn", prompt, res.StopReason)
	}
	return text
}

// TestContainer runs docs/container.md's stdio command for the engine (the
// block marked "stdio") and drives mm in it as an editor would: over the
// container's stdio, with the project mounted at its host path and the
// config at $HOME/.config/mm. scripts/container-test.sh builds the image
// and runs this test (go test -tags container).
func TestContainer(t *testing.T) {
	f := newFixture(t, "stdio")
	name := fmt.Sprintf("mm-container-test-%d", time.Now().UnixNano())
	cmd := f.command(t, name, 0)
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(5 * time.Second)
		_ = exec.Command(f.engine, "rm", "-f", name).Run()
	})
	defer func() {
		if t.Failed() {
			t.Logf("mm's stderr:\n%s", conn.Stderr.String())
		}
	}()

	// The first run may wait for the engine to set up.
	ctx := testwait.Context(t)
	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if init.AgentInfo == nil || init.AgentInfo.Version != protocol.Version {
		t.Errorf("agentInfo %+v, want version %s (the image is built from this tree)", init.AgentInfo, protocol.Version)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: f.project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new in %s: %v", f.project, err)
	}
	f.checkWrite(t, turn(ctx, t, conn, sess.SessionId, "write"), false)
	f.checkCommit(t, turn(ctx, t, conn, sess.SessionId, "commit"))
	// The config was read from $HOME/.config/mm/config.yaml.
	if logs := conn.Stderr.String(); !strings.Contains(logs, "config "+cfgInside+"/config.yaml") {
		t.Errorf("the banner does not name %s/config.yaml:\n%s", cfgInside, logs)
	}

	// Closing stdin ends mm, the container and the engine's client, with
	// exit status 0; --rm then removes the container.
	start := time.Now()
	if err := conn.Close(testwait.Hang); err != nil {
		t.Fatalf("after stdin closed: %v", err)
	}
	t.Logf("exited %v after stdin closed", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(testwait.Hang)
	for {
		out, err := exec.Command(f.engine, "ps", "-a", "-q", "--filter", "name=^"+name+"$").Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("container %s still listed after exit: %q (%v)", name, out, err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// containerServed is a documented serve command running: the host port
// its 8765 is published on, its stderr, and its exit.
type containerServed struct {
	f      *fixture
	name   string
	port   int
	stderr *acptest.SyncBuffer
	exited chan error
}

// serveContainer runs f's documented serve command (attached: its -d left
// out), on a free host port, and waits for mm to say it listens.
func serveContainer(t *testing.T, f *fixture) *containerServed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &containerServed{f: f, port: ln.Addr().(*net.TCPAddr).Port, stderr: &acptest.SyncBuffer{}, exited: make(chan error, 1),
		name: fmt.Sprintf("mm-container-serve-%d", time.Now().UnixNano())}
	ln.Close()
	cmd := f.command(t, s.name, s.port)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	go func() {
		// 0.0.0.0 is every address: Go names it [::] when IPv6 is there.
		re := regexp.MustCompile(`^mm serve: listening on http://(0\.0\.0\.0|\[::\]):8765/acp$`)
		sc := bufio.NewScanner(pipe)
		said := false
		for sc.Scan() {
			s.stderr.Write(append(sc.Bytes(), '\n'))
			if !said && re.MatchString(sc.Text()) {
				close(listening)
				said = true
			}
		}
		_, _ = io.Copy(s.stderr, pipe)
		s.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = exec.Command(f.engine, "rm", "-f", s.name).Run()
		if t.Failed() {
			t.Logf("the container's stderr:\n%s", s.stderr.String())
		}
	})
	select {
	case <-listening:
	case err := <-s.exited:
		t.Fatalf("the container exited: %v", err)
	case <-time.After(testwait.Hang):
		t.Fatal("mm serve in the container did not say it listens, nor exit")
	}
	return s
}

// connect starts `mm connect` on the host to the served mm, initialized.
func (s *containerServed) connect(ctx context.Context, t *testing.T) *acptest.Conn {
	t.Helper()
	connect := exec.Command(mmBin, "connect", fmt.Sprintf("ws://127.0.0.1:%d/acp", s.port))
	connect.Env = append(os.Environ(), "MM_TOKEN="+containerToken)
	conn, err := acptest.Process(connect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(5 * time.Second)
		if t.Failed() {
			t.Logf("mm connect's stderr:\n%s", conn.Stderr.String())
		}
	})
	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if init.AgentInfo == nil || init.AgentInfo.Version != protocol.Version {
		t.Errorf("agentInfo %+v, want version %s (the image is built from this tree)", init.AgentInfo, protocol.Version)
	}
	return conn
}

// stop stops the container as docs/container.md does (`stop -t 40`): tini
// hands SIGTERM to mm, which drains and exits 0, and so does the engine's
// client.
func (s *containerServed) stop(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(s.f.engine, "stop", "-t", "40", s.name).CombinedOutput(); err != nil {
		t.Errorf("%s stop: %v: %s", s.f.engine, err, out)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("the container exited: %v", err)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("the container did not exit after stop")
	}
	if !strings.Contains(s.stderr.String(), "serve: stopped") {
		t.Error("mm serve did not say it stopped")
	}
}

// checkWalls checks the turn of the script's "walls", in mm serve with
// bubblewrap and the session's own network: the command holds no
// capability, reads no byte of mm's config, does not reach the port mm
// listens on through the container's loopback, and sees no process of
// mm's.
func checkWalls(t *testing.T, text string) {
	t.Helper()
	if !strings.Contains(text, "walls-done") {
		t.Fatalf("the walls' turn did not run to its end: %q", text)
	}
	if !strings.Contains(text, "capeff=0000000000000000") {
		t.Errorf("the command holds capabilities: %q", text)
	}
	for mark, why := range map[string]string{
		"CONFIG-READ":      "read mm's config",
		"LOOPBACK-REACHED": "reached mm's port on the container's loopback (the session has no network of its own)",
		"MM-SEEN":          "saw mm's process (no PID namespace of its own)",
	} {
		if strings.Contains(text, mark) {
			t.Errorf("the command %s: %q", why, text)
		}
	}
}

// TestContainerServe runs docs/container.md's serve command for a project
// (the block marked "serve": `serve -listen 0.0.0.0:8765`, the port
// published, the token in MM_SERVE_TOKEN, the project at its host path as
// the working directory and so the root, the engine's options the sandbox
// needs) and drives it as an editor would, through `mm connect` on the
// host: a session in the project, a turn whose bash writes a file (as the
// project's owner, its HOME read-only), one that commits, one that tries
// the sandbox's walls; mm confines with bubblewrap. Then `ENGINE stop`
// drains it: the container exits 0.
func TestContainerServe(t *testing.T) {
	f := newFixture(t, "serve")
	s := serveContainer(t, f)
	ctx := testwait.Context(t)
	conn := s.connect(ctx, t)
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: f.project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new in %s: %v", f.project, err)
	}
	f.checkWrite(t, turn(ctx, t, conn, sess.SessionId, "write"), true)
	f.checkCommit(t, turn(ctx, t, conn, sess.SessionId, "commit"))
	checkWalls(t, turn(ctx, t, conn, sess.SessionId, "walls"))
	// The commands docs/container.md gives confine with bubblewrap.
	if logs := s.stderr.String(); !strings.Contains(logs, "sandbox: workspace-write, network on, with bubblewrap") {
		t.Errorf("mm serve does not confine with bubblewrap, and the session's own network:\n%s", logs)
	}
	if err := conn.Close(testwait.Hang); err != nil {
		t.Errorf("mm connect after stdin closed: %v", err)
	}
	s.stop(t)
}

// TestContainerServeMin runs docs/container.md's smallest serve command
// (the block marked "serve-min", issue 21's `docker run -p 8765:8765 -e
// MM_SERVE_TOKEN=… IMAGE serve -listen 0.0.0.0:8765` with the tun device):
// the image's user, mm's embedded defaults, /home/mm its root, confined by
// Landlock, with a warning that names the option that gives bubblewrap.
// `mm connect` on the host opens a session there; `ENGINE stop` drains it
// to exit 0.
func TestContainerServeMin(t *testing.T) {
	f := newFixture(t, "serve-min")
	s := serveContainer(t, f)
	ctx := testwait.Context(t)
	conn := s.connect(ctx, t)
	if _, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: "/home/mm", McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/new in /home/mm: %v", err)
	}
	if logs := s.stderr.String(); !strings.Contains(logs, "with landlock") || !strings.Contains(logs, "unmask=/proc/*") {
		t.Errorf("without the option that unmasks /proc, mm does not say it confines with Landlock, and which option gives bubblewrap:\n%s", logs)
	}
	if err := conn.Close(testwait.Hang); err != nil {
		t.Errorf("mm connect after stdin closed: %v", err)
	}
	s.stop(t)
}

// TestContainerCommands: the image's entrypoint is mm, with -acp only as
// its default argument: `IMAGE --version` prints the version, and words mm
// does not understand are a usage error, not ACP on stdio.
func TestContainerCommands(t *testing.T) {
	engine, image, _ := containerEngine(t)
	out, err := exec.Command(engine, "run", "--rm", "--network=none", image, "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != protocol.Version {
		t.Errorf("IMAGE --version: %q %v, want %s", out, err, protocol.Version)
	}
	cmd := exec.Command(engine, "run", "--rm", "-i", "--network=none", image, "-acp", "serve")
	cmd.Stdin = strings.NewReader("")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr.String(), `unexpected argument "serve"`) {
		t.Errorf("IMAGE -acp serve: exit %d (%v), stderr %q; want 2 and a usage error", code, err, stderr.String())
	}
}

// TestContainerSandboxNeeds: what docs/container.md says mm serve does
// without what the sandbox needs of the engine. Without the tun device it
// does not start, and names the option that gives it; as root, which
// holds no CAP_SYS_ADMIN in a container, it does not start either, and
// says to run it as a user or which capabilities it needs.
func TestContainerSandboxNeeds(t *testing.T) {
	engine, image, _ := containerEngine(t)
	for _, c := range []struct {
		what string
		args []string
		want []string
	}{
		{"no tun device", nil, []string{"slirp4netns needs /dev/net/tun", "--device /dev/net/tun"}},
		{"root", []string{"--user", "0:0", "--device", "/dev/net/tun"}, []string{"mm runs as root without CAP_SYS_ADMIN", "run mm there as a user", "--cap-add SYS_ADMIN --cap-add NET_ADMIN"}},
	} {
		args := append(append([]string{"run", "--rm", "-e", "MM_SERVE_TOKEN=" + containerToken}, c.args...), image, "serve", "-listen", "0.0.0.0:8765")
		cmd := exec.Command(engine, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(testwait.Hang):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s: mm serve did not exit: %s", c.what, stderr.String())
			continue
		}
		t.Logf("%s: %s %s: exit %d:\n%s", c.what, engine, strings.Join(args, " "), cmd.ProcessState.ExitCode(), stderr.String())
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("%s: exit %d, want 1 (mm serve refuses to start)", c.what, code)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: mm does not say %q", c.what, w)
			}
		}
	}
}
