package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mm-agent/mm/internal/tcptest"
)

// requireEnv, set to 1, makes a machine without a working bubblewrap fail
// the tests that need it instead of skipping them (.ci/run installs it).
const requireEnv = "MM_REQUIRE_BWRAP"

func confining(t *testing.T) *Sandbox {
	t.Helper()
	s := Detect()
	if s.Kind() == Bubblewrap {
		return s
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s, and %s=1", s.Why(), requireEnv)
	}
	t.Skip(s.Why())
	return nil
}

// tenant is whom confined commands run as in these tests: nobody when the
// tests run as root (a confined command must hold less than mm), mm's own
// user otherwise (nil).
var tenant = func() *Ident {
	if os.Geteuid() != 0 {
		return nil
	}
	return &Ident{UID: 65534, GID: 65534, Name: "nobody"}
}()

// own gives path (and what it holds) to the tenant when the tests run as
// root, so that what keeps the tenant's command from a path in these tests
// is the sandbox, not the path's owner; and lets the tenant search the
// folder that holds it (t.TempDir's is root's alone).
func own(t *testing.T, path string) string {
	t.Helper()
	if tenant == nil {
		return path
	}
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(tenant.UID), int(tenant.GID))
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// workDir is a session's folder: a new temporary folder, the tenant's.
func workDir(t *testing.T) string { return own(t, t.TempDir()) }

// outsideDir is a folder outside /tmp (which a confined command sees as
// its own, empty), removed at the end: what a command must not write. It
// is the tenant's, so that only the sandbox keeps the command out.
func outsideDir(t *testing.T) string {
	t.Helper()
	base, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	if tenant != nil {
		base = "/var/lib" // root's home is root's alone
	}
	d, err := os.MkdirTemp(base, ".mm-sandbox-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if tenant != nil {
		if err := os.Chown(d, int(tenant.UID), int(tenant.GID)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// run runs script with bash in dir under p (as the tenant) and returns its
// output and whether it exited 0.
func run(t *testing.T, s *Sandbox, p Policy, dir, script string) (string, bool) {
	t.Helper()
	if p.User == nil {
		p.User = tenant
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	started, err := s.Wrap(cmd, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	started()
	return string(out), err == nil
}

func TestWorkspaceWrite(t *testing.T) {
	s := confining(t)
	cwd, outside := workDir(t), outsideDir(t)
	secret := filepath.Join(outsideDir(t), "ssh")
	if err := os.MkdirAll(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "id_ed25519"), []byte("PRIVATE"), 0o600); err != nil {
		t.Fatal(err)
	}
	sessions := filepath.Join(cwd, ".mm", "sessions")
	if err := os.MkdirAll(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sessions, "other.json"), []byte("HISTORY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(cwd, "out")); err != nil {
		t.Fatal(err)
	}
	own(t, cwd)
	own(t, filepath.Dir(secret))
	p := Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}, Hidden: []string{secret, sessions}}

	if out, ok := run(t, s, p, cwd, "echo kept > mine && cat mine && echo tmp > /tmp/x && cat /tmp/x"); !ok || out != "kept\ntmp\n" {
		t.Errorf("writing the cwd and the private temp folder: %v %q", ok, out)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "mine")); string(b) != "kept\n" {
		t.Errorf("the cwd's file is not on disk: %q", b)
	}
	for name, script := range map[string]string{
		"outside":          "echo x > " + filepath.Join(outside, "f"),
		"through a link":   "echo x > out/f",
		"/proc/self/root":  "echo x > /proc/self/root" + filepath.Join(outside, "f"),
		"another's folder": "echo x > " + filepath.Join(secret, "f"),
	} {
		if out, ok := run(t, s, p, cwd, script); ok {
			t.Errorf("%s: the write went through: %q", name, out)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the folder outside was written: %v", entries)
	}
	// The cwd's parent, under /tmp, is the command's own temporary folder:
	// a write there stays there (run as another user, the command may not
	// write it at all: bubblewrap made it as root's).
	if out, ok := run(t, s, p, cwd, "echo x > ../escaped-"+filepath.Base(cwd)); !ok && tenant == nil {
		t.Errorf("writing the private /tmp: %q", out)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cwd), "escaped-"+filepath.Base(cwd))); err == nil {
		t.Error("the cwd's parent was written on disk")
	}
	for name, script := range map[string]string{
		"~/.ssh":   "cat " + filepath.Join(secret, "id_ed25519"),
		"sessions": "cat " + filepath.Join(sessions, "other.json"),
		"listing":  "ls -A " + sessions + " " + secret,
	} {
		out, _ := run(t, s, p, cwd, script)
		if strings.Contains(out, "PRIVATE") || strings.Contains(out, "HISTORY") || strings.Contains(out, "id_ed25519\n") || strings.Contains(out, "other.json\n") {
			t.Errorf("%s: a hidden path was read: %q", name, out)
		}
	}
}

func TestReadOnly(t *testing.T) {
	s := confining(t)
	cwd := workDir(t)
	if err := os.WriteFile(filepath.Join(cwd, "a"), []byte("seen"), 0o644); err != nil {
		t.Fatal(err)
	}
	own(t, cwd)
	p := Policy{Mode: ReadOnly, Network: true, Writable: []string{cwd}}
	if out, ok := run(t, s, p, cwd, "cat a"); !ok || out != "seen" {
		t.Errorf("reading the cwd: %v %q", ok, out)
	}
	if out, ok := run(t, s, p, cwd, "echo x > b"); ok {
		t.Errorf("read-only wrote the cwd: %q", out)
	}
}

func TestNetwork(t *testing.T) { networkSwitch(t, confining(t)) }

// networkSwitch checks that a command under s reaches a TCP listener of
// the test's with the network on, and not with it off.
func networkSwitch(t *testing.T, s *Sandbox) {
	t.Helper()
	script := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", tcptest.Listener(t))
	cwd := workDir(t)
	if out, ok := run(t, s, Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}}, cwd, script); !ok || !strings.Contains(out, "connected") {
		t.Errorf("with the network on: %v %q", ok, out)
	}
	if out, ok := run(t, s, Policy{Mode: WorkspaceWrite, Network: false, Writable: []string{cwd}}, cwd, script); ok || strings.Contains(out, "connected") {
		t.Errorf("with the network off, a TCP connection was made: %q", out)
	}
}

func TestGitWorksInTheWorkspace(t *testing.T) {
	s := confining(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	cwd := workDir(t)
	script := "git init -q && echo hi > f && git add f && git -c user.name=mm -c user.email=mm@example.com commit -qm first && git log --format=%s"
	if out, ok := run(t, s, Policy{Mode: WorkspaceWrite, Writable: []string{cwd}}, cwd, script); !ok || !strings.HasSuffix(out, "first\n") {
		t.Errorf("git in the workspace: %v %q", ok, out)
	}
	// sandbox.protectGit: the work tree is still writable, .git is not.
	guarded := Policy{Mode: WorkspaceWrite, Writable: []string{cwd}, Protected: []string{".env", ".git/**"}}
	commit := "echo more >> f && git -c user.name=mm -c user.email=mm@example.com commit -qam second"
	if out, ok := run(t, s, guarded, cwd, commit); ok {
		t.Errorf("a commit went through a protected .git: %q", out)
	}
	if out, _ := run(t, s, guarded, cwd, "git log --format=%s && cat f"); out != "first\nhi\nmore\n" {
		t.Errorf("after the refused commit: %q, want one commit and the file changed", out)
	}
}

func TestUnconfinedPolicy(t *testing.T) {
	s := &Sandbox{kind: Unconfined, why: "none here"}
	cmd := exec.Command("true")
	path := cmd.Path
	if _, err := s.Wrap(cmd, Policy{}, nil); err != nil || cmd.Path != path {
		t.Errorf("the off policy changed the command: %v %s", err, cmd.Path)
	}
	if _, err := s.Wrap(cmd, Policy{Mode: WorkspaceWrite}, nil); err == nil || cmd.Path != path {
		t.Errorf("a machine that cannot confine: %v %s", err, cmd.Path)
	}
	if _, err := ParseMode("rw"); err == nil {
		t.Error("ParseMode took an unknown mode")
	}
}

func TestReadOnlyInsideTheWorkspace(t *testing.T) {
	s := confining(t)
	cwd := workDir(t)
	env := filepath.Join(cwd, ".env")
	if err := os.WriteFile(env, []byte("TOKEN=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	own(t, cwd)
	p := Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}, Protected: []string{".env", "*.pem"}}
	if out, ok := run(t, s, p, cwd, "cat .env && echo changed > .env"); ok || !strings.Contains(out, "TOKEN=1") {
		t.Errorf("the protected file: %v %q, want it read and not written", ok, out)
	}
	if b, _ := os.ReadFile(env); string(b) != "TOKEN=1\n" {
		t.Errorf("the protected file changed: %q", b)
	}
	if out, ok := run(t, s, p, cwd, "echo x > other && cat other"); !ok || out != "x\n" {
		t.Errorf("the rest of the workspace: %v %q", ok, out)
	}
}

// readableInHidden makes a hidden folder holding a readable one and a
// sibling: what the sessions of one mm keep of their cut outputs.
func readableInHidden(t *testing.T) (hidden, mine, other string) {
	t.Helper()
	hidden = filepath.Join(t.TempDir(), "outputs")
	mine, other = filepath.Join(hidden, "mine"), filepath.Join(hidden, "other")
	for dir, data := range map[string]string{mine: "MINE", other: "OTHER"} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "call_1.out"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	own(t, hidden) // so that only the sandbox keeps the tenant from other
	return hidden, mine, other
}

// checkReadableInHidden runs a command under p in every mode: it reads the
// readable folder, not its hidden sibling, and writes neither.
func checkReadableInHidden(t *testing.T, s *Sandbox, hidden, mine, other string) {
	t.Helper()
	cwd := workDir(t)
	for _, mode := range Modes {
		p := Policy{Mode: mode, Network: true, Writable: []string{cwd}, Hidden: []string{hidden}, Readable: []string{mine}, Temp: filepath.Join(t.TempDir(), "tmp")}
		out, _ := run(t, s, p, cwd, "cat "+filepath.Join(mine, "call_1.out")+"; echo; cat "+filepath.Join(other, "call_1.out")+"; echo x > "+filepath.Join(mine, "new"))
		if !strings.HasPrefix(out, "MINE\n") || strings.Contains(out, "OTHER") {
			t.Errorf("%s: want the readable folder read and its hidden sibling not: %q", mode, out)
		}
		if _, err := os.Stat(filepath.Join(mine, "new")); err == nil {
			t.Errorf("%s: the readable folder was written", mode)
			os.Remove(filepath.Join(mine, "new"))
		}
	}
}

// TestReadableInHidden: a readable folder inside a hidden one (the
// session's outputs among every session's) is read, its siblings are not.
func TestReadableInHidden(t *testing.T) {
	s := confining(t)
	hidden, mine, other := readableInHidden(t)
	checkReadableInHidden(t, s, hidden, mine, other)
}
