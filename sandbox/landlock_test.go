package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Main() // this test binary is Landlock's helper too
	os.Exit(m.Run())
}

// landlocked is a Landlock sandbox, or the test skips (fails with
// MM_REQUIRE_LANDLOCK=1) on a kernel without it.
func landlocked(t *testing.T) *Sandbox {
	t.Helper()
	s := LandlockOnly()
	if s.Kind() == Landlock {
		t.Logf("Landlock ABI %d", s.ABI())
		return s
	}
	if os.Getenv("MM_REQUIRE_LANDLOCK") == "1" {
		t.Fatalf("%s, and MM_REQUIRE_LANDLOCK=1", s.Why())
	}
	t.Skipf("%s (%s, kernel %s)", s.Why(), runtime.GOOS, kernel())
	return nil
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func TestLandlockWorkspaceWrite(t *testing.T) {
	s := landlocked(t)
	cwd, outside := workDir(t), outsideDir(t)
	if err := os.Symlink(outside, filepath.Join(cwd, "out")); err != nil {
		t.Fatal(err)
	}
	own(t, cwd)
	temp := filepath.Join(workDir(t), "tmp")
	p := Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}, Temp: temp}
	if out, ok := run(t, s, p, cwd, "echo kept > mine && cat mine && echo x > /dev/null && echo t > $TMPDIR/t"); !ok || out != "kept\n" {
		t.Errorf("writing the cwd and the session's temporary folder: %v %q", ok, out)
	}
	if out, ok := run(t, s, p, cwd, "echo x > /tmp/shared-"+filepath.Base(cwd)); ok {
		t.Errorf("wrote the shared /tmp: %q", out)
	}
	for name, script := range map[string]string{
		"outside":         "echo x > " + filepath.Join(outside, "f"),
		"through a link":  "echo x > out/f",
		"/proc/self/root": "echo x > /proc/self/root" + filepath.Join(outside, "f"),
	} {
		if out, ok := run(t, s, p, cwd, script); ok {
			t.Errorf("%s: the write went through: %q", name, out)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the folder outside was written: %v", entries)
	}
	if _, err := exec.LookPath("git"); err == nil {
		script := "git init -q && echo hi > f && git add f && git -c user.name=mm -c user.email=mm@example.com commit -qm first && git log --format=%s"
		if out, ok := run(t, s, p, cwd, script); !ok || !strings.HasSuffix(out, "first\n") {
			t.Errorf("git in the workspace: %v %q", ok, out)
		}
	}
	ro := Policy{Mode: ReadOnly, Network: true, Writable: []string{cwd}}
	if out, ok := run(t, s, ro, cwd, "cat mine && echo x > other"); ok || !strings.Contains(out, "kept") {
		t.Errorf("read-only: %v %q, want the cwd read and not written", ok, out)
	}
}

func TestLandlockNetworkOff(t *testing.T) {
	s := landlocked(t)
	if s.ABI() < 4 {
		t.Skipf("Landlock ABI %d has no network rules (4 does)", s.ABI())
	}
	networkSwitch(t, s)
}

// TestLandlockHides: a hidden path's files cannot be read, nor written in
// full, while the rest of its folder can.
func TestLandlockHides(t *testing.T) {
	s := landlocked(t)
	home := outsideDir(t)
	secret := filepath.Join(home, "ssh")
	if err := os.MkdirAll(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{filepath.Join(secret, "id_ed25519"): "PRIVATE", filepath.Join(home, "notes"): "PUBLIC"} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A link to the hidden folder beside it leads nowhere either.
	if err := os.Symlink(secret, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	own(t, home)
	cwd := workDir(t)
	for _, mode := range []Mode{WorkspaceWrite, Full} {
		p := Policy{Mode: mode, Network: true, Writable: []string{cwd}, Hidden: []string{secret}, Temp: filepath.Join(workDir(t), "tmp")}
		out, _ := run(t, s, p, cwd, "cat "+filepath.Join(home, "notes")+"; echo; cat "+filepath.Join(secret, "id_ed25519")+" "+filepath.Join(home, "link", "id_ed25519")+"; ls "+secret+"; echo x > "+filepath.Join(secret, "new"))
		if strings.Contains(out, "PRIVATE") || strings.Contains(out, "id_ed25519\n") || !strings.Contains(out, "PUBLIC") {
			t.Errorf("%s: want the folder's other file read and the hidden one not: %q", mode, out)
		}
		if _, err := os.Stat(filepath.Join(secret, "new")); err == nil {
			t.Errorf("%s: the hidden folder was written", mode)
		}
	}
	p := Policy{Mode: Full, Network: true, Hidden: []string{secret}}
	if out, ok := run(t, s, p, cwd, "echo x > "+filepath.Join(home, "notes")+" && cat "+filepath.Join(home, "notes")); !ok || out != "x\n" {
		t.Errorf("full: the rest is writable: %v %q", ok, out)
	}
}

// TestLandlockReadableInHidden: as TestReadableInHidden, with Landlock.
func TestLandlockReadableInHidden(t *testing.T) {
	s := landlocked(t)
	hidden, mine, other := readableInHidden(t)
	checkReadableInHidden(t, s, hidden, mine, other)
}
