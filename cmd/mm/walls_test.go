package main

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/kubelet"
	"github.com/mm-agent/mm/internal/tcptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// The walls: a tenant of mm serve, with nothing but a valid token and its
// session's bash, attacks from inside its command (docs/sandbox.md's
// table). The command must hold less than mm: no capability and, when mm
// runs as root, not root; none of mm's secrets (its config, named by a
// relative -config, its state and signing key, ~/.ssh, ~/.pgpass, its
// environment, its process); none of this machine's loopback services
// with the network on (the outside it does reach); no socket file with the
// network off. Each is run with bubblewrap and with Landlock, mm run by
// root and by a user.

// saPath is where a pod has its service account's token, namespace and
// CA (Kubernetes' automount), which client-go reads.
const saPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// wallSecrets are the secrets mm's environment holds in these tests.
var wallSecrets = []string{"PG-ENV-SECRET", "OPENAI-ENV-SECRET", "CONSUL-ENV-SECRET", serveToken}

func TestWallsBubblewrapRoot(t *testing.T) { walls(t, "bubblewrap", false) }
func TestWallsLandlockRoot(t *testing.T)   { walls(t, "landlock", false) }
func TestWallsBubblewrapUser(t *testing.T) { walls(t, "bubblewrap", true) }
func TestWallsLandlockUser(t *testing.T)   { walls(t, "landlock", true) }

func walls(t *testing.T, with string, asUser bool) {
	testwait.Short(t, "mm serve attacked from inside its sandbox")
	switch with {
	case "bubblewrap":
		sandboxtest.Bubblewrap(t)
	case "landlock":
		if s := sandbox.LandlockOnly(); s.Kind() != sandbox.Landlock {
			if os.Getenv("MM_REQUIRE_LANDLOCK") == "1" {
				t.Fatalf("%s, and MM_REQUIRE_LANDLOCK=1", s.Why())
			}
			t.Skip(s.Why())
		}
	}
	root := os.Geteuid() == 0
	if !asUser && !root {
		t.Skip("mm run by root: the tests do not run as root")
	}
	// mm's user: root, or (asUser, when the tests are root) nobody, whose
	// commands then run as nobody too.
	runAs := root && asUser
	// Outside /tmp, which a command under bubblewrap sees as its own and
	// empty: mm's files must be hidden by name, its socket out of reach by
	// the filter.
	base, err := os.UserHomeDir()
	if err != nil || root {
		base = "/var/lib"
	}
	dir, err := os.MkdirTemp(base, "mm-walls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, prefix := mmBin, []string(nil)
	if runAs {
		bin = copyTo(t, mmBin)
		prefix = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
		if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
			t.Fatalf("slirp4netns run by a user needs /dev/net/tun open to all (0666, as udev makes it; .ci/run sets it): %v %v", fi.Mode(), err)
		}
	}
	secretFiles := map[string]string{
		".ssh/id_ed25519": "SSH-SECRET",
		".pgpass":         "localhost:5432:*:mm:PGPASS-SECRET",
	}
	for name, text := range secretFiles {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A pgpass from a secret, as a pod mounts one: links through ..data
	// (PGPASSFILE, which mm hides).
	pgSecret := filepath.Join(dir, "pg-secret")
	if err := os.Mkdir(pgSecret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := kubelet.Write(pgSecret, "..2026_12_06_17_00_00.1", map[string]string{"pgpass": "localhost:5432:*:mm:KUBE-PGPASS-SECRET"}); err != nil {
		t.Fatal(err)
	}
	pgpass := filepath.Join(pgSecret, "pgpass")
	// secretNames are the names the command reads the kubelet-written
	// secrets by.
	secretNames := pgpass + " " + filepath.Join(pgSecret, "..data", "pgpass") + " " + filepath.Join(pgSecret, "..2*", "pgpass")
	// mm in a pod: the kubelet mounts the service account's token, which
	// lets mm's provider read and patch the pods of its namespace (a
	// pod's image among what a patch changes), at the path client-go
	// reads it from, written as a secret is, on a tmpfs of its own that
	// nothing else of the container's shows. Root can give mm that
	// (a mount namespace of mm's own, as the container's), and writes the
	// files there through /proc/PID/root once mm runs.
	umountSA := ""
	if root {
		prefix = append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
			"mkdir -p " + saPath + " && mount -t tmpfs -o size=64k,mode=0755 kube-api-access " + saPath + ` && exec "$@"`, "sh"}, prefix...)
		umountSA = "umount " + saPath + " 2>&1 && echo MOUNTED-sa\n"
		secretNames += " " + saPath + "/token " + saPath + "/..data/token " + saPath + "/..2*/token /run/secrets/kubernetes.io/serviceaccount/token"
	}
	hostFile := filepath.Join(dir, "written-by-the-tenant")
	sockDir := filepath.Join(dir, "run")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	loopPort := tcptest.Listener(t)
	outside := outsideAddr(t)
	// Everything here is as readable to the tenant's user as to mm's (it
	// is the same user, or the files are given to it), so that what keeps
	// the command from them is the sandbox alone.
	sandboxtest.Own(t, dir)
	if runAs {
		// mm itself runs as nobody here: its home is nobody's.
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	project := filepath.Join(dir, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Own(t, project)

	tokens := "serve:\n  tokens:\n    - {name: alice, token: alice-token-0123456789}\nsessions:\n  enabled: true\nsandbox:\n  with: " + with + "\n"
	attackScript := "cat " + secretNames + " 2>&1\n" + umountSA + attackLines(dir, "serve.yaml", hostFile, sock, loopPort, outside)
	// The secret changed in place while a command runs (a long-lived one,
	// an MCP server, would wait for it): the test changes it between
	// ready and go.
	ready, goOn := filepath.Join(project, "ready"), filepath.Join(project, "go")
	waitScript := "touch " + ready + "; while [ ! -e " + goOn + " ]; do sleep 0.05; done; cat " + secretNames + " 2>&1; echo ATTACK-DONE"
	script := serveScript + fmt.Sprintf("  - match: \"^attack$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", attackScript) +
		fmt.Sprintf("  - match: \"^attack while the secret changes$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", waitScript)
	s := startServeIn(t, prefix, bin, dir, "serve.yaml", scriptedModel, script, tokens,
		"MM_SERVE_TOKEN="+serveToken, "PGPASSWORD=PG-ENV-SECRET", "OPENAI_API_KEY=OPENAI-ENV-SECRET", "CONSUL_HTTP_TOKEN=CONSUL-ENV-SECRET", "PGPASSFILE="+pgpass)
	sa := ""
	if root {
		// By the path the link /var/run leads to: an absolute link
		// under /proc/PID/root leads into the test's own root.
		sa = filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "root", "run", strings.TrimPrefix(saPath, "/var/run/"))
		if err := kubelet.Write(sa, "..2026_12_06_17_00_00.1", map[string]string{"token": "KUBE-SA-TOKEN-SECRET", "namespace": "mm"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	said := func(what string) string {
		t.Helper()
		before := len(w.rec.Updates(res.SessionId))
		if r, err := w.ask(ctx, res.SessionId, "attack"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("%s: %v %v", what, r, err)
		}
		text := acptest.Text(w.rec.Updates(res.SessionId)[before:])
		if !strings.Contains(text, "ATTACK-DONE") {
			t.Fatalf("%s: the attack did not run to its end: %q", what, text)
		}
		return text
	}
	keys := signingKeys(t, dir)
	check := func(what, text string, network bool) {
		t.Helper()
		t.Logf("%s:\n%s", what, text)
		mine := strconv.Itoa(os.Geteuid())
		if runAs {
			mine = "65534"
		}
		switch {
		case root && !asUser && strings.Contains(text, "ID=0\n"):
			t.Errorf("%s: mm is root, and the command ran as root", what)
		case !root || asUser:
			if !strings.Contains(text, "ID="+mine+"\n") {
				t.Errorf("%s: the command did not run as mm's user %s", what, mine)
			}
		}
		if !strings.Contains(text, "CAPEFF=0000000000000000") {
			t.Errorf("%s: the command holds capabilities", what)
		}
		secrets := append(append([]string{"alice-token-0123456789", "SSH-SECRET", "PGPASS-SECRET", "KUBE-PGPASS-SECRET", "KUBE-SA-TOKEN-SECRET"}, wallSecrets...), keys...)
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s: the command read the secret %q", what, secret)
			}
		}
		for _, mark := range []string{"WROTE-HOST", "USERNS-MADE", "SIGNAL-SENT", "LOOPBACK-REACHED", "MOUNTED"} {
			if strings.Contains(text, mark) {
				t.Errorf("%s: %s", what, mark)
			}
		}
		if _, err := os.Stat(hostFile); err == nil {
			t.Errorf("%s: the command wrote a file outside its folder", what)
		}
		if !network && strings.Contains(text, "UNIX-CONNECTED") {
			t.Errorf("%s: with the network off, the command reached a socket outside its folder", what)
		}
		if network && outside != "" && !strings.Contains(text, "OUTSIDE-REACHED") {
			t.Errorf("%s: with the network on, the command did not reach the outside (%s)", what, outside)
		}
		if !network && strings.Contains(text, "OUTSIDE-REACHED") {
			t.Errorf("%s: with the network off, the command reached the outside", what)
		}
	}
	check("network on", said("network on"), true)
	if _, err := w.SetSessionConfigOption(ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: res.SessionId, ConfigId: "network", Value: "off"}}); err != nil {
		t.Fatal(err)
	}
	check("network off", said("network off"), false)

	before := len(w.rec.Updates(res.SessionId))
	asked := make(chan error, 1)
	go func() {
		r, err := w.ask(ctx, res.SessionId, "attack while the secret changes")
		if err == nil && r.StopReason != acp.StopReasonEndTurn {
			err = fmt.Errorf("stop reason %s", r.StopReason)
		}
		asked <- err
	}()
	waitUntil(t, "the tenant's command waiting for the secret to change", func() bool { _, err := os.Stat(ready); return err == nil })
	if err := kubelet.Write(pgSecret, "..2026_12_06_17_01_00.2", map[string]string{"pgpass": "localhost:5432:*:mm:ROTATED-PGPASS-SECRET"}); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Own(t, pgSecret)
	if sa != "" {
		// The kubelet renews the token before it expires.
		if err := kubelet.Write(sa, "..2026_12_06_17_01_00.2", map[string]string{"token": "ROTATED-SA-TOKEN-SECRET", "namespace": "mm"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-asked; err != nil {
		t.Fatalf("the attack while the secret changes: %v", err)
	}
	text := acptest.Text(w.rec.Updates(res.SessionId)[before:])
	t.Logf("the secret changed in place:\n%s", text)
	if !strings.Contains(text, "ATTACK-DONE") {
		t.Fatalf("the attack while the secret changes did not run to its end: %q", text)
	}
	for _, secret := range []string{"KUBE-PGPASS-SECRET", "ROTATED-PGPASS-SECRET", "KUBE-SA-TOKEN-SECRET", "ROTATED-SA-TOKEN-SECRET"} {
		if strings.Contains(text, secret) {
			t.Errorf("the command read the secret %q, changed in place while it ran", secret)
		}
	}
}

// attackLines is the tenant's command line: each line tries one way out and
// prints a mark when it gets through.
func attackLines(home, config, hostFile, sock string, loopPort int, outside string) string {
	state := filepath.Join(home, ".local", "state", "mm")
	cfg := filepath.Join(home, config)
	lines := []string{
		"echo ID=$(id -u)",
		`echo CAPEFF=$(sed -n 's/^CapEff:\s*//p' /proc/self/status)`,
		// Undo what hides mm's files, then read them.
		"for p in " + state + " " + cfg + " " + filepath.Join(home, ".ssh") + " " + filepath.Join(home, ".pgpass") + "; do umount $p 2>&1 && echo MOUNTED-$p; done",
		"cat " + cfg + " " + filepath.Join(home, ".ssh", "id_ed25519") + " " + filepath.Join(home, ".pgpass") + " 2>&1",
		"for f in " + state + "/* " + state + "/*/*; do [ -f \"$f\" ] && base64 -w0 \"$f\" 2>&1; echo; done",
		// Write the machine's file system.
		"mount -o remount,rw / 2>&1 && echo MOUNTED-rw; mount -t tmpfs x /mnt 2>&1 && echo MOUNTED-tmpfs",
		"echo x > " + hostFile + " 2>&1 && echo WROTE-HOST",
		// Gain capabilities in a namespace of its own.
		"unshare -Ur true 2>&1 && echo USERNS-MADE",
		// mm's environment, and every process's it can read.
		"env",
		"for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $e 2>/dev/null; done | grep -a -E 'SECRET|token'",
		// mm itself: serv[e] does not match this script's own text.
		`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'serv[e] -listen 127' && kill -0 ${p#/proc/} 2>/dev/null && echo SIGNAL-SENT-${p#/proc/}; done`,
		// This machine's services.
		fmt.Sprintf("(exec 3<>/dev/tcp/127.0.0.1/%d && echo LOOPBACK-REACHED) 2>&1", loopPort),
		`perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n"; connect(S, pack_sockaddr_un($ARGV[0])) or die "connect: $!\n"; print "UNIX-CONNECTED\n"' ` + sock + " 2>&1",
	}
	if host, port, err := net.SplitHostPort(outside); err == nil {
		lines = append(lines, fmt.Sprintf("(exec 3<>/dev/tcp/%s/%s && echo OUTSIDE-REACHED) 2>&1", host, port))
	}
	lines = append(lines, "echo ATTACK-DONE")
	return strings.Join(lines, "\n")
}

// signingKeys are the files of mm's state folder, in base64 as the attack
// prints them: what the command must not read.
func signingKeys(t *testing.T, home string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(filepath.Join(home, ".local", "state", "mm"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && len(b) >= 16 {
				out = append(out, base64.StdEncoding.EncodeToString(b))
			}
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatal("mm's state folder holds no key: the test would prove nothing")
	}
	return out
}

// outsideAddr is an address of this machine that is not loopback, where a
// test listener waits: "" on a machine that has none.
func outsideAddr(t *testing.T) string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && ip.IP.IsGlobalUnicast() {
			return tcptest.Outside(t)
		}
	}
	t.Log("this machine has no address but loopback: the outside is not checked")
	return ""
}

// copyTo copies the program bin into a new temporary folder and returns
// the copy's path.
func copyTo(t *testing.T, bin string) string {
	t.Helper()
	dst := filepath.Join(sandboxtest.Own(t, t.TempDir()), filepath.Base(bin))
	if out, err := exec.Command("cp", bin, dst).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return dst
}

// TestWallsHookRunsConfined: an operator's preToolCall hook runs `git
// status` in the tenant's folder, where the tenant has set git's
// core.fsmonitor to a program of its own. The hook runs confined as the
// tenant's commands are, so that the tenant's program cannot write outside
// its folder nor read mm's config, as it could if the hook ran as mm.
func TestWallsHookRunsConfined(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap and a hook")
	sandboxtest.Bubblewrap(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	base, err := os.UserHomeDir()
	if err != nil || os.Geteuid() == 0 {
		base = "/var/lib"
	}
	dir, err := os.MkdirTemp(base, "mm-hook-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	escaped := filepath.Join(dir, "escaped")
	project := filepath.Join(dir, "project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	monitor := fmt.Sprintf("#!/bin/sh\nid -u > %s\ncat %s >> %s\n", escaped, filepath.Join(dir, "serve.yaml"), escaped)
	setup := fmt.Sprintf("git init -q && echo %s | base64 -d > .monitor && chmod +x .monitor && git config core.fsmonitor \"$PWD/.monitor\" && echo armed",
		base64.StdEncoding.EncodeToString([]byte(monitor)))
	script := serveScript + fmt.Sprintf("  - match: \"^arm$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", setup)
	// safe.directory as the image sets it system-wide (Dockerfile): git
	// run by root would otherwise refuse a repository root does not own.
	hooks := "hooks:\n  preToolCall: [\"git -c safe.directory='*' status --porcelain >/dev/null 2>&1; true\"]\n"
	sandboxtest.Own(t, dir)
	s := startServeModel(t, mmBin, dir, "serve.yaml", scriptedModel, script, hooks, "MM_SERVE_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	// The first call arms the monitor (its hook ran before it, when there
	// was no repository); the second's hook runs git status in it.
	for i := 0; i < 2; i++ {
		if r, err := w.ask(ctx, res.SessionId, "arm"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("arm: %v %v", r, err)
		}
	}
	if text := acptest.Text(w.rec.Updates(res.SessionId)); !strings.Contains(text, "armed") {
		t.Fatalf("the tenant did not set its monitor: %q", text)
	}
	if b, err := os.ReadFile(escaped); err == nil {
		t.Errorf("the tenant's core.fsmonitor, run by the hook, wrote outside its folder: %q", b)
	}
	// The same monitor, started by the tenant's own git in its folder,
	// shows it would run: the hook did run it, confined.
	if _, err := os.Stat(filepath.Join(project, ".monitor")); err != nil {
		t.Errorf("the monitor is not there: %v", err)
	}
}
