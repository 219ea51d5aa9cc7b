package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mm-agent/mm/internal/testwait"
)

// The editor's mm links no cluster: mm serve on a cluster config runs the
// mm-node beside it (every cluster test goes that way, clusterBin being
// mm). Alone, or beside an mm-node of another version, it refuses with
// what to do, and exits 1.
func TestServeClusterHandOff(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte("cluster:\n  name: t\n  advertise: 127.0.0.1:1\n  peers: [127.0.0.1:2]\n"+tlsLines(clusterCerts(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, dir string) (string, int) {
		t.Helper()
		ctx := testwait.Context(t)
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "mm"), "serve", "-listen", "127.0.0.1:0", "-config", cfg)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + dir + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		code := 0
		if err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		return string(out), code
	}
	lone := func(t *testing.T) string {
		dir := t.TempDir()
		b, err := os.ReadFile(mmBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mm"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("no mm-node", func(t *testing.T) {
		out, code := serve(t, lone(t))
		if code != 1 || !strings.Contains(out, "cluster.name is set, and this mm links no cluster: a cluster node runs mm-node") ||
			!strings.Contains(out, "go build -o DIR/ ./cmd/mm ./cmd/mm-node") || strings.Contains(out, "listening") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("another version", func(t *testing.T) {
		dir := lone(t)
		fake := "#!/bin/sh\necho v0.0.1-other\n"
		if err := os.WriteFile(filepath.Join(dir, "mm-node"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := serve(t, dir)
		if code != 1 || !strings.Contains(out, "is not this mm's mm-node (it answers --version \"v0.0.1-other\"") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("an mm named mm-node", func(t *testing.T) {
		// A copy of mm as mm-node answers the same --version: mm hands
		// off to it once, and it refuses rather than handing off again.
		dir := lone(t)
		if err := os.Link(filepath.Join(dir, "mm"), filepath.Join(dir, "mm-node")); err != nil {
			t.Fatal(err)
		}
		out, code := serve(t, dir)
		if code != 1 || strings.Count(out, "running "+filepath.Join(dir, "mm-node")) != 1 ||
			!strings.Contains(out, "links no cluster either: it is an mm, not mm-node") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("beside mm-node", func(t *testing.T) {
		// The real pair: mm becomes mm-node (exec: the same process), which
		// joins, serves, and drains on SIGTERM as a node does.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		node := filepath.Join(t.TempDir(), "node.yaml")
		if err := os.WriteFile(node, []byte(fmt.Sprintf("cluster:\n  name: t\n  advertise: 127.0.0.1:%d\n  peers: [127.0.0.1:%d]\n%s", port, port+1, tlsLines(clusterCerts(t)))), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx := testwait.Context(t)
		cmd := exec.CommandContext(ctx, mmBin, "serve", "-listen", "127.0.0.1:0", "-config", node)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "MM_SERVE_TOKEN=" + serveToken}
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var log strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "cluster t: member at") {
				break
			}
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
		err = cmd.Wait()
		out := log.String()
		if err != nil || !strings.Contains(out, "serve: cluster.name is set: this mm links no cluster; running "+filepath.Join(filepath.Dir(mmBin), "mm-node")) ||
			!strings.Contains(out, "cluster t: member at") || !strings.Contains(out, "serve: stopped") {
			t.Errorf("%v:\n%s", err, out)
		}
	})
}
