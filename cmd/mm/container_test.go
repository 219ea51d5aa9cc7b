//go:build container

package main

import (
	"context"
	"fmt"
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

// TestContainer drives `mm -acp` inside the image as an editor would: over
// the container's stdio, with the project mounted at its host path and the
// config at $HOME/.config/mm. scripts/container-test.sh builds the image and
// runs this test (go test -tags container).
func TestContainer(t *testing.T) {
	engine, image := os.Getenv("MM_CONTAINER_ENGINE"), os.Getenv("MM_CONTAINER_IMAGE")
	if engine == "" || image == "" {
		t.Skip("run scripts/container-test.sh: it builds the image and sets MM_CONTAINER_ENGINE and MM_CONTAINER_IMAGE")
	}
	uid, gid := os.Getuid(), os.Getgid()
	wantUID := uid
	project, cfgDir := t.TempDir(), t.TempDir()
	if uid == 0 {
		// Root runs the image as its own user, which must reach both dirs.
		wantUID = imageUID
		for _, d := range []string{project, cfgDir} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	const cfgInside = "/home/mm/.config/mm"
	if err := os.WriteFile(filepath.Join(cfgDir, "script.yaml"), []byte(containerScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("model:\n  provider: scripted\n  script: %s/script.yaml\nskills:\n  dirs: []\n", cfgInside)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	name := fmt.Sprintf("mm-container-test-%d", time.Now().UnixNano())
	// The scripted model needs no network. ":z" relabels the mounts for
	// SELinux hosts and does nothing elsewhere.
	args := []string{"run", "-i", "--rm", "--name", name, "--network=none",
		"-v", project + ":" + project + ":z", "-w", project,
		"-v", cfgDir + ":" + cfgInside + ":ro,z"}
	if uid != 0 {
		args = append(args, "--user", fmt.Sprintf("%d:%d", uid, gid))
		if filepath.Base(engine) == "podman" {
			// Rootless podman: the caller's uid inside is the caller's
			// uid outside only in a keep-id user namespace.
			args = append(args, "--userns=keep-id")
		}
	}
	args = append(args, image)
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

	// bash ran as a non-root uid: the caller's (or the image's, for root).
	m := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(text)
	switch {
	case m == nil:
		t.Errorf("bash printed no uid=…: %q", text)
	case m[1] == "0":
		t.Errorf("the container runs as root")
	case m[1] != fmt.Sprint(wantUID):
		t.Errorf("bash ran as uid %s, want %d", m[1], wantUID)
	}
	if !strings.Contains(text, "home=/home/mm") || !strings.Contains(text, "home-writable") {
		t.Errorf("HOME is not /home/mm, or not writable by uid %d: %q", wantUID, text)
	}
	// The config was read from $HOME/.config/mm/config.yaml.
	if logs := conn.Stderr.String(); !strings.Contains(logs, "config "+cfgInside+"/config.yaml") {
		t.Errorf("the banner does not name %s/config.yaml:\n%s", cfgInside, logs)
	}

	// The file is in the project on the host, and it belongs to the caller.
	made := filepath.Join(project, "made.txt")
	data, err := os.ReadFile(made)
	if err != nil {
		t.Fatalf("the file bash wrote is not on the host: %v", err)
	}
	if string(data) != "made in the container\n" {
		t.Errorf("made.txt holds %q", data)
	}
	if fi, err := os.Stat(made); err == nil {
		if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != wantUID {
			t.Errorf("made.txt belongs to uid %d on the host, want %d (rootless docker maps container uids elsewhere: see docs/container.md)", owner, wantUID)
		}
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
