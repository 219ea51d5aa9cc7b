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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/protocol"
	"github.com/mm-agent/mm/protocol/acptest"
)

// imageUID is the image's default user (Dockerfile).
const imageUID = 10001

// containerScript is the scripted model mounted into the container: one
// turn that has bash write a file in the project and report who it runs as.
const containerScript = `
rules:
  - match: "^write$"
    steps:
      - toolCalls:
          - name: bash
            args: {command: "echo made in the container > made.txt && echo uid=$(id -u) && echo home=$HOME && touch \"$HOME/.probe\" && echo home-writable"}
      - {text: "bash said: {{last_tool_output}}"}
`

// fixture is what a container test mounts: a project, and a config
// directory with the scripted model, each on the host.
type fixture struct {
	engine, image   string
	project, cfgDir string
	wantUID         int // who bash runs as in the container
}

// cfgInside is where the image reads the config from ($HOME/.config/mm).
const cfgInside = "/home/mm/.config/mm"

// newFixture makes the project and the config, or skips the test when
// scripts/container-test.sh did not start it.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	engine, image := os.Getenv("MM_CONTAINER_ENGINE"), os.Getenv("MM_CONTAINER_IMAGE")
	if engine == "" || image == "" {
		t.Skip("run scripts/container-test.sh: it builds the image and sets MM_CONTAINER_ENGINE and MM_CONTAINER_IMAGE")
	}
	f := &fixture{engine: engine, image: image, project: t.TempDir(), cfgDir: t.TempDir(), wantUID: os.Getuid()}
	if f.wantUID == 0 {
		// Root runs the image as its own user, which must reach both dirs.
		f.wantUID = imageUID
		for _, d := range []string{f.project, f.cfgDir} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(f.cfgDir, "script.yaml"), []byte(containerScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("model:\n  provider: scripted\n  script: %s/script.yaml\nskills:\n  dirs: []\n", cfgInside)
	if err := os.WriteFile(filepath.Join(f.cfgDir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// runArgs are the arguments of `ENGINE run` before the image, as
// docs/container.md gives them: as the caller, the project mounted at its
// host path and the working directory, the config at $HOME/.config/mm.
// ":z" relabels the mounts for SELinux hosts and does nothing elsewhere.
func (f *fixture) runArgs(name string, extra ...string) []string {
	args := []string{"run", "--rm", "--name", name,
		"-v", f.project + ":" + f.project + ":z", "-w", f.project,
		"-v", f.cfgDir + ":" + cfgInside + ":ro,z"}
	if uid := os.Getuid(); uid != 0 {
		args = append(args, "--user", fmt.Sprintf("%d:%d", uid, os.Getgid()))
		if filepath.Base(f.engine) == "podman" {
			// Rootless podman: the caller's uid inside is the caller's
			// uid outside only in a keep-id user namespace.
			args = append(args, "--userns=keep-id")
		}
	}
	return append(args, extra...)
}

// checkWrite checks the turn of the script's "write": bash ran as a
// non-root uid with a writable HOME, and wrote made.txt in the project on
// the host, as the caller.
func (f *fixture) checkWrite(t *testing.T, text string) {
	t.Helper()
	m := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(text)
	switch {
	case m == nil:
		t.Errorf("bash printed no uid=…: %q", text)
	case m[1] == "0":
		t.Errorf("the container runs as root")
	case m[1] != fmt.Sprint(f.wantUID):
		t.Errorf("bash ran as uid %s, want %d", m[1], f.wantUID)
	}
	if !strings.Contains(text, "home=/home/mm") || !strings.Contains(text, "home-writable") {
		t.Errorf("HOME is not /home/mm, or not writable by uid %d: %q", f.wantUID, text)
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
		if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != f.wantUID {
			t.Errorf("made.txt belongs to uid %d on the host, want %d (rootless docker maps container uids elsewhere: see docs/container.md)", owner, f.wantUID)
		}
	}
}

// TestContainer drives `mm -acp` inside the image as an editor would: over
// the container's stdio, with the project mounted at its host path and the
// config at $HOME/.config/mm. scripts/container-test.sh builds the image and
// runs this test (go test -tags container).
func TestContainer(t *testing.T) {
	f := newFixture(t)
	engine, image, project := f.engine, f.image, f.project
	name := fmt.Sprintf("mm-container-test-%d", time.Now().UnixNano())
	// The scripted model needs no network. The image's default argument
	// is -acp.
	args := f.runArgs(name, "-i", "--network=none", image)
	t.Logf("%s %s", engine, strings.Join(args, " "))
	cmd := exec.Command(engine, args...)
	conn, err := acptest.Process(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(5 * time.Second)
		_ = exec.Command(engine, "rm", "-f", name).Run()
	})
	defer func() {
		if t.Failed() {
			t.Logf("mm's stderr:\n%s", conn.Stderr.String())
		}
	}()

	// The first run may wait for the engine to set up; later steps are quick.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	init, err := conn.Init(ctx)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if init.AgentInfo == nil || init.AgentInfo.Version != protocol.Version {
		t.Errorf("agentInfo %+v, want version %s (the image is built from this tree)", init.AgentInfo, protocol.Version)
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new in %s: %v", project, err)
	}
	res, err := conn.Ask(ctx, sess.SessionId, "write")
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	text := acptest.Text(conn.Client.Updates(sess.SessionId))
	t.Logf("stop %s, agent said: %q", res.StopReason, text)
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stop reason %s, want end_turn", res.StopReason)
	}

	f.checkWrite(t, text)
	// The config was read from $HOME/.config/mm/config.yaml.
	if logs := conn.Stderr.String(); !strings.Contains(logs, "config "+cfgInside+"/config.yaml") {
		t.Errorf("the banner does not name %s/config.yaml:\n%s", cfgInside, logs)
	}

	// Closing stdin ends mm, the container and the engine's client, with
	// exit status 0; --rm then removes the container.
	start := time.Now()
	if err := conn.Close(30 * time.Second); err != nil {
		t.Fatalf("after stdin closed: %v", err)
	}
	t.Logf("exited %v after stdin closed", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command(engine, "ps", "-a", "-q", "--filter", "name=^"+name+"$").Output()
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

// TestContainerServe runs the image as docs/container.md serves it on the
// network (`serve -listen 0.0.0.0:8765`, the port published, the token in
// MM_SERVE_TOKEN, the project at its host path as the working directory
// and so the root) and drives it as an editor would, through `mm connect`
// on the host: a session in the project, a turn whose bash writes a file.
// Then `ENGINE stop` drains it: the container exits 0.
func TestContainerServe(t *testing.T) {
	f := newFixture(t)
	const token = "container-serve-token-0123456789"
	// A free port on the host's loopback for the published 8765.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	name := fmt.Sprintf("mm-container-serve-%d", time.Now().UnixNano())
	args := f.runArgs(name, "-p", fmt.Sprintf("127.0.0.1:%d:8765", port), "-e", "MM_SERVE_TOKEN="+token,
		f.image, "serve", "-listen", "0.0.0.0:8765")
	t.Logf("%s %s", f.engine, strings.Join(args, " "))
	cmd := exec.Command(f.engine, args...)
	stderr := &acptest.SyncBuffer{}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	exited := make(chan error, 1)
	go func() {
		// 0.0.0.0 is every address: Go names it [::] when IPv6 is there.
		re := regexp.MustCompile(`^mm serve: listening on http://(0\.0\.0\.0|\[::\]):8765/acp$`)
		sc := bufio.NewScanner(pipe)
		said := false
		for sc.Scan() {
			stderr.Write(append(sc.Bytes(), '\n'))
			if !said && re.MatchString(sc.Text()) {
				close(listening)
				said = true
			}
		}
		_, _ = io.Copy(stderr, pipe)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = exec.Command(f.engine, "rm", "-f", name).Run()
		if t.Failed() {
			t.Logf("the container's stderr:\n%s", stderr.String())
		}
	})
	select {
	case <-listening:
	case err := <-exited:
		t.Fatalf("the container exited: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("mm serve in the container did not say it listens")
	}

	connect := exec.Command(mmBin, "connect", fmt.Sprintf("ws://127.0.0.1:%d/acp", port))
	connect.Env = append(os.Environ(), "MM_TOKEN="+token)
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	res, err := conn.Ask(ctx, sess.SessionId, "write")
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	text := acptest.Text(conn.Client.Updates(sess.SessionId))
	t.Logf("stop %s, agent said: %q", res.StopReason, text)
	if res.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stop reason %s, want end_turn", res.StopReason)
	}
	f.checkWrite(t, text)
	if err := conn.Close(10 * time.Second); err != nil {
		t.Errorf("mm connect after stdin closed: %v", err)
	}

	// `ENGINE stop` sends SIGTERM, which tini hands to mm: it drains and
	// exits 0, and so does the engine's client.
	if out, err := exec.Command(f.engine, "stop", "-t", "40", name).CombinedOutput(); err != nil {
		t.Errorf("%s stop: %v: %s", f.engine, err, out)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the container exited: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the container did not exit after stop")
	}
	if !strings.Contains(stderr.String(), "serve: stopped") {
		t.Error("mm serve did not say it stopped")
	}
}

// TestContainerCommands: the image's entrypoint is mm, with -acp only as
// its default argument: `IMAGE --version` prints the version, and words mm
// does not understand are a usage error, not ACP on stdio.
func TestContainerCommands(t *testing.T) {
	engine, image := os.Getenv("MM_CONTAINER_ENGINE"), os.Getenv("MM_CONTAINER_IMAGE")
	if engine == "" || image == "" {
		t.Skip("run scripts/container-test.sh: it builds the image and sets MM_CONTAINER_ENGINE and MM_CONTAINER_IMAGE")
	}
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
