package prompt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// TestGatherGit: in a real repository the block holds the branch, the
// changed and untracked files, the last commit and the date; a cwd below
// the root reports the root.
func TestGatherGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	run(t, root, "git", "init", "-q", "-b", "trunk")
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, root, "git", "add", "a.txt")
	run(t, root, "git", "commit", "-q", "-m", "first commit")
	for name, text := range map[string]string{"a.txt": "changed\n", "new.txt": "n\n", "sub/x": ""} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cwd := filepath.Join(root, "sub")
	now := time.Date(2026, 5, 14, 9, 0, 0, 0, time.UTC)
	start := time.Now()
	gitRoot, _ := Root(cwd)
	env := Gather(context.Background(), cwd, gitRoot, now, nil)
	t.Logf("gathered in %v", time.Since(start))
	var b strings.Builder
	env.render(&b, Policy{})
	block := b.String()
	for _, want := range []string{
		"- Date: 2026-05-14 (Thursday)\n", "- Working directory: " + cwd + "\n",
		"- Git: repository at " + root + ", branch trunk\n", "    " + " M a.txt\n", "    ?? new.txt\n", "    ?? sub/\n",
		"first commit\n", "- Sandbox: none", "- Approval: edits and commands run without asking (yolo)",
	} {
		if !strings.Contains(block, want) {
			t.Errorf("the block lacks %q:\n%s", want, block)
		}
	}
	_, err := exec.LookPath("rg")
	if got := strings.Contains(block, "- rg (ripgrep): installed\n"); got != (err == nil) {
		t.Errorf("rg installed: block says %v, PATH says %v", got, err == nil)
	}
}

// TestGatherNoGit: outside a repository no git command runs and the block
// says so; the policy lines follow the session's settings.
func TestGatherNoGit(t *testing.T) {
	cwd := t.TempDir()
	root, _ := Root(cwd)
	env := Gather(context.Background(), cwd, root, time.Now(), nil)
	if env.Git != nil {
		t.Fatalf("a folder outside any repository has a git snapshot: %+v", env.Git)
	}
	var b strings.Builder
	env.render(&b, Policy{Sandbox: "workspace-write", Writable: []string{cwd}, Ask: true})
	block := b.String()
	for _, want := range []string{
		"- Git: not a git repository\n",
		"- Sandbox: workspace-write: commands and file tools may write only in " + cwd + " and the temporary folder; a write elsewhere fails; network off (loopback only)\n",
		"- Approval: the user approves each edit and command before it runs",
	} {
		if !strings.Contains(block, want) {
			t.Errorf("the block lacks %q:\n%s", want, block)
		}
	}
}

// TestGitSnapshotBounded: a status of many lines shows the first twenty
// and counts the others; a git that hangs is given up after GitTimeout.
func TestGitSnapshotBounded(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	run(t, root, "git", "init", "-q")
	for i := range 25 {
		if err := os.WriteFile(filepath.Join(root, "f"+string(rune('a'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := snapshot(context.Background(), root, root, nil)
	if len(g.Status) != maxStatusLines || g.More != 5 || g.Err != "" {
		t.Errorf("%d lines shown, %d more, err %q; want 20, 5 and none", len(g.Status), g.More, g.Err)
	}
	if !strings.HasSuffix(g.Branch, "(no commits yet)") {
		t.Errorf("branch %q of a repository without commits", g.Branch)
	}

	// A git that never answers: the confine hook stands in one that sleeps.
	start := time.Now()
	g = snapshot(context.Background(), root, root, func(cmd *exec.Cmd) (func(), error) {
		cmd.Path, cmd.Args = "/bin/sleep", []string{"sleep", "60"}
		return func() {}, nil
	})
	t.Logf("a hanging git was given up after %v", time.Since(start))
	if !strings.Contains(g.Err, "did not answer within") || time.Since(start) > 30*time.Second {
		t.Errorf("hanging git: err %q after %v", g.Err, time.Since(start))
	}
}

// TestRGLookedForOnceAMinute: whether rg is installed is looked for on
// PATH again only after a minute.
func TestRGLookedForOnceAMinute(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	now := time.Now().Add(time.Hour) // past any look of the other tests
	if rgInstalled(now) {
		t.Fatal("rg found on an empty PATH")
	}
	rg := filepath.Join(dir, "rg")
	if err := os.WriteFile(rg, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rgInstalled(now.Add(time.Second)) {
		t.Error("looked for again within the minute")
	}
	if !rgInstalled(now.Add(rgLookAgain)) {
		t.Error("not looked for again after a minute")
	}
}
