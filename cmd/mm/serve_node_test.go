package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mm-agent/mm/internal/testwait"
)

// tsClients is the folder of the TypeScript SDK's clients test: its
// package.json pins the SDK, its package-lock.json everything it installs.
const tsClients = "testdata/ts"

// TestServeTypeScriptClients: the official TypeScript SDK 2.4.0's network
// clients, createWebSocketStream and createHttpStream, unmodified, against
// `mm serve`: initialize, session/new, a pong turn, a bash turn with its
// permission request answered, a cancel, two sessions on one connection,
// session/load after a reconnect (testdata/ts/clients.mjs); then the same
// over stdio, the SDK's ndJsonStream on `mm -acp` and on `mm connect` to
// the server, as an editor starts an agent. It needs
// Node.js 18 or later and the pinned package, which it installs with `npm
// ci` when missing. .ci/run installs Node.js and sets MM_REQUIRE_NODE=1:
// there, anything missing fails the test. Elsewhere (the README's test
// command on a machine without Node.js) it is skipped, saying why.
func TestServeTypeScriptClients(t *testing.T) {
	var s *served
	runTypeScriptClients(t, func() *served {
		s = startServe(t, "yolo: false\nsessions:\n  enabled: true\n")
		return s
	}, func() map[string]stdioAgent {
		// The same steps over stdio, as an editor starts an agent: mm -acp
		// on the server's config (its scripted model), its commands
		// confined as the server's are, and mm connect to the server.
		cfg, err := os.ReadFile(filepath.Join(s.dir, "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		acpCfg := filepath.Join(s.dir, "acp.yaml")
		if err := os.WriteFile(acpCfg, append(cfg, "sandbox:\n  mode: workspace-write\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		return map[string]stdioAgent{
			"mm-acp":     {Cmd: mmBin, Args: []string{"-acp", "-config", acpCfg}, Cwd: s.dir, Env: map[string]string{"HOME": t.TempDir()}},
			"mm-connect": {Cmd: mmBin, Args: []string{"connect", s.ws}, Cwd: s.dir, Env: map[string]string{"HOME": t.TempDir(), "MM_TOKEN": serveToken}},
		}
	})
}

// stdioAgent is an agent the TypeScript clients start and speak to over
// its stdin and stdout (clients.mjs's MM_TS_STDIO).
type stdioAgent struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Cwd  string            `json:"cwd"`
	Env  map[string]string `json:"env"`
}

// TestClusterTypeScriptClients: the same clients, connected to a node of
// a three-node cluster whose sessions the cluster places on every node:
// turns, permission requests, cancels and reconnections across nodes.
func TestClusterTypeScriptClients(t *testing.T) {
	var nodes []*node
	runTypeScriptClients(t, func() *served {
		nodes = startCluster(t, 3, "yolo: false\nsessions:\n  enabled: true\n")
		return nodes[0].served
	}, nil)
	var created []int
	for _, nd := range nodes {
		created = append(created, len(regexp.MustCompile(`session \S+ created`).FindAllString(nd.stderr.String(), -1)))
	}
	t.Logf("sessions created on each node: %v", created)
}

// runTypeScriptClients runs cmd/mm/testdata/ts/clients.mjs, the official
// TypeScript SDK's clients, against the mm serve start returns, and the
// agents stdio gives once it has started (nil: none) over the SDK's stdio
// stream.
func runTypeScriptClients(t *testing.T, start func() *served, stdio func() map[string]stdioAgent) {
	testwait.Short(t, "the TypeScript SDK's clients (Node.js)")
	node := npmPackage(t, tsClients, "@agentclientprotocol/sdk", "2.4.0")
	s := start()
	cmd := exec.CommandContext(testwait.Context(t), node, "clients.mjs", s.url, serveToken, s.project(t))
	cmd.Dir = tsClients
	transports := 2
	if stdio != nil {
		agents := stdio()
		b, err := json.Marshal(agents)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(os.Environ(), "MM_TS_STDIO="+string(b))
		transports += len(agents)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript clients failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "ok ") {
			n++
		}
	}
	if want := 11 * transports; n != want {
		t.Errorf("%d steps passed, want %d:\n%s", n, want, out)
	}
}

// npmPackage makes sure the npm package name@version is installed in dir
// (from its package-lock.json, with npm ci, when it is not) and returns
// node's path. Where Node.js 18 or later or npm is missing, the test is
// skipped, saying why, or fails with MM_REQUIRE_NODE=1 (.ci/run).
func npmPackage(t *testing.T, dir, name, version string) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("MM_REQUIRE_NODE") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (this test needs Node.js 18 or later and npm; .ci/run installs them)", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	out, err := exec.Command(node, "--version").Output()
	major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
	if err != nil || major < 18 {
		missing("node %s is too old", strings.TrimSpace(string(out)))
	}
	var pkg struct{ Version string }
	installed := func() bool {
		data, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
		return err == nil && json.Unmarshal(data, &pkg) == nil && pkg.Version == version
	}
	if !installed() {
		npm, err := exec.LookPath("npm")
		if err != nil {
			missing("npm is not on PATH to install %s %s", name, version)
		}
		out, err := exec.Command(npm, "ci", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error").CombinedOutput()
		if err != nil {
			// npm ci refuses a lock whose optional platform packages
			// have no version (acpx's, a known npm fault); npm install
			// keeps to the lock all the same.
			out, err = exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error").CombinedOutput()
		}
		if err != nil || !installed() {
			missing("installing %s %s in cmd/mm/%s failed: %v\n%s", name, version, dir, err, out)
		}
	}
	return node
}
