package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tsClients is the folder of the TypeScript SDK's clients test: its
// package.json pins the SDK, its package-lock.json everything it installs.
const tsClients = "testdata/ts"

// TestServeTypeScriptClients: the official TypeScript SDK 2.4.0's network
// clients, createWebSocketStream and createHttpStream, unmodified, against
// `mm serve`: initialize, session/new, a pong turn, a bash turn with its
// permission request answered, a cancel, two sessions on one connection,
// session/load after a reconnect (testdata/ts/clients.mjs). It needs
// Node.js 18 or later and the pinned package (`npm ci --prefix
// cmd/mm/testdata/ts`, which .ci/run does); without them it fails, unless
// MM_SKIP_NODE_TESTS=1.
func TestServeTypeScriptClients(t *testing.T) {
	if os.Getenv("MM_SKIP_NODE_TESTS") == "1" {
		t.Skip("MM_SKIP_NODE_TESTS=1")
	}
	const how = "install Node.js 18 or later and run `npm ci --prefix cmd/mm/testdata/ts` (.ci/run does both), or set MM_SKIP_NODE_TESTS=1 to skip this test"
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %s", how)
	}
	out, err := exec.Command(node, "--version").Output()
	major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
	if err != nil || major < 18 {
		t.Fatalf("node %s is too old: %s", strings.TrimSpace(string(out)), how)
	}
	var pkg struct{ Version string }
	data, err := os.ReadFile(filepath.Join(tsClients, "node_modules", "@agentclientprotocol", "sdk", "package.json"))
	if err == nil {
		err = json.Unmarshal(data, &pkg)
	}
	if err != nil || pkg.Version != "2.4.0" {
		t.Fatalf("@agentclientprotocol/sdk 2.4.0 is not installed in %s (found %q, %v): %s", tsClients, pkg.Version, err, how)
	}
	s := startServe(t, "yolo: false\nsessions:\n  enabled: true\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "clients.mjs", s.url, serveToken, s.project(t))
	cmd.Dir = tsClients
	out, err = cmd.CombinedOutput()
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
	if n != 14 {
		t.Errorf("%d steps passed, want 14:\n%s", n, out)
	}
}
