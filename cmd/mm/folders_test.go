package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// The tests of this file: on mm serve, folders have owners. The first
// token to open a session in a folder owns it, recorded in the store; no
// other token opens a session there, inside it, or in a folder that holds
// it, and no other token's commands or file tools see it, live or not,
// restarts included. serve.sharedFolders are anyone's.

// twoTokens is the serve section of alice's and bob's tokens.
const twoTokens = "serve:\n  tokens:\n    - {name: alice, token: alice-token-0123456789}\n    - {name: bob, token: bob-token-0123456789ab}\n"

const (
	alicesToken = "alice-token-0123456789"
	bobsToken   = "bob-token-0123456789ab"
)

// mkdirs makes each folder and returns them.
func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// notYours checks that err is the refusal of a folder another token owns:
// invalid params, saying so, and naming no owner.
func notYours(t *testing.T, what string, err error) {
	t.Helper()
	var re *acp.RequestError
	switch {
	case !errors.As(err, &re) || re.Code != -32602:
		t.Errorf("%s: %v, want invalid params (another token's folder)", what, err)
	case !strings.Contains(re.Error(), "another token's folder"):
		t.Errorf("%s: %v, want the error to say it is another token's folder", what, err)
	case strings.Contains(re.Error(), "alice"):
		t.Errorf("%s: the error names the folder's owner: %v", what, err)
	}
}

// TestServeFoldersHaveOwners: the file store keeps the folders' owners in
// mm's state folder, and a restart keeps them.
func TestServeFoldersHaveOwners(t *testing.T) {
	foldersHaveOwners(t, "", false)
}

// TestServeFoldersHaveOwnersPostgres: Postgres (store.url) keeps them, and
// a server with a new state folder (another machine) knows them.
func TestServeFoldersHaveOwnersPostgres(t *testing.T) {
	foldersHaveOwners(t, fmt.Sprintf("store:\n  url: %q\n", pg.URL(t)), true)
}

// foldersHaveOwners: alice opens a session in p1, bob one in p2. Bob
// cannot open a session in p1, in a folder inside it, in a folder that
// holds it, nor name it in additionalDirectories; nor load, resume or fork
// his own session there. Alice opens one inside her folder. After a
// restart (with freshState, in a state folder of its own) the same holds.
func foldersHaveOwners(t *testing.T, extra string, freshState bool) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	p1, p2 := filepath.Join(work, "p1"), filepath.Join(work, "p2")
	mkdirs(t, filepath.Join(p1, "sub"), p2)
	cfg := "sessions:\n  enabled: true\n" + twoTokens + extra
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, serveScript, cfg)
	ctx := testwait.Context(t)
	alice, bob := dialAs(t, s, alicesToken), dialAs(t, s, bobsToken)
	newIn := func(c *serveClient, cwd string, dirs ...string) (acp.SessionId, error) {
		res, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, AdditionalDirectories: dirs, McpServers: []acp.McpServer{}})
		return res.SessionId, err
	}
	a, err := newIn(alice, p1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newIn(bob, p2)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(when string) {
		t.Helper()
		_, err := newIn(bob, p1)
		notYours(t, when+": bob's session/new in alice's folder", err)
		_, err = newIn(bob, filepath.Join(p1, "sub"))
		notYours(t, when+": bob's session/new inside alice's folder", err)
		_, err = newIn(bob, work)
		notYours(t, when+": bob's session/new in a folder that holds alice's", err)
		_, err = newIn(bob, p2, p1)
		notYours(t, when+": bob's additionalDirectories naming alice's folder", err)
		_, err = bob.LoadSession(ctx, acp.LoadSessionRequest{SessionId: b, Cwd: p1, McpServers: []acp.McpServer{}})
		notYours(t, when+": bob's session/load of his session in alice's folder", err)
		_, err = bob.ResumeSession(ctx, acp.ResumeSessionRequest{SessionId: b, Cwd: p1})
		notYours(t, when+": bob's session/resume of his session in alice's folder", err)
		_, err = bob.UnstableForkSession(ctx, acp.UnstableForkSessionRequest{SessionId: b, Cwd: p1})
		notYours(t, when+": bob's session/fork of his session into alice's folder", err)
		_, err = bob.UnstableForkSession(ctx, acp.UnstableForkSessionRequest{SessionId: b, Cwd: p2, AdditionalDirectories: []string{p1}})
		notYours(t, when+": bob's session/fork naming alice's folder in additionalDirectories", err)
	}
	// A live session is loaded where it runs: bob's is closed, so that
	// his load and resume open it from the store, in the cwd they name.
	if _, err := bob.CloseSession(ctx, acp.CloseSessionRequest{SessionId: b}); err != nil {
		t.Fatal(err)
	}
	refused("live")
	if _, err := newIn(alice, filepath.Join(p1, "sub")); err != nil {
		t.Errorf("alice's session/new inside her own folder: %v", err)
	}
	if _, err := newIn(bob, p2); err != nil {
		t.Errorf("bob's second session/new in his own folder: %v", err)
	}

	_ = s.cmd.Process.Kill()
	_ = s.waitExit(t, "killed")
	if freshState {
		// Another machine: nothing of the first server's state folder.
		if err := os.RemoveAll(filepath.Join(dir, ".local", "state", "mm")); err != nil {
			t.Fatal(err)
		}
	}
	s = startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, serveScript, cfg)
	alice, bob = dialAs(t, s, alicesToken), dialAs(t, s, bobsToken)
	refused("after a restart")
	if _, err := bob.LoadSession(ctx, acp.LoadSessionRequest{SessionId: b, Cwd: p2, McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("bob's load of his session in his folder after a restart: %v", err)
	}
	if _, err := alice.LoadSession(ctx, acp.LoadSessionRequest{SessionId: a, Cwd: p1, McpServers: []acp.McpServer{}}); err != nil {
		t.Errorf("alice's load of her session in her folder after a restart: %v", err)
	}
}

// TestServeTenantsApartAfterRestart: bob's confined bash and read_file
// see nothing of alice's folder, her session files included, once she
// has no live session (mm serve was restarted), with bubblewrap.
func TestServeTenantsApartAfterRestart(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	tenantsApartAfterRestart(t, "bubblewrap")
}

// TestServeTenantsApartAfterRestartLandlock: the same with Landlock.
func TestServeTenantsApartAfterRestartLandlock(t *testing.T) {
	testwait.Short(t, "mm serve with Landlock")
	if s := sandbox.LandlockOnly(); s.Kind() != sandbox.Landlock {
		if os.Getenv("MM_REQUIRE_LANDLOCK") == "1" {
			t.Fatalf("%s, and MM_REQUIRE_LANDLOCK=1", s.Why())
		}
		t.Skip(s.Why())
	}
	tenantsApartAfterRestart(t, "landlock")
}

// tenantsDir makes a folder for a test's tenants outside /tmp, which a
// confined command sees as its own and empty anyway: their folders must
// be hidden by name. Run as root, the tenants' commands run as
// sandboxtest.Tenant, who cannot search root's home: the folder is then
// made under /var/lib, open to anyone's search.
func tenantsDir(t *testing.T) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	if sandboxtest.Tenant() != nil {
		home = "/var/lib"
	}
	dir, err := os.MkdirTemp(home, ".mm-tenants-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if sandboxtest.Tenant() != nil {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// saidIn prompts sid and returns the text of the turn.
func saidIn(t *testing.T, c *serveClient, sid acp.SessionId, prompt string) string {
	t.Helper()
	ctx := testwait.Context(t)
	before := len(c.rec.Updates(sid))
	if r, err := c.ask(ctx, sid, prompt); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("%s: %v %v", prompt, r, err)
	}
	return acptest.Text(c.rec.Updates(sid)[before:])
}

// peekScript is serveScript with "peek" (bash reads path and lists
// folder), "read" (read_file of path) and "list" (read_file of folder's
// .mm/sessions).
func peekScript(path, folder string) string {
	return serveScript + fmt.Sprintf("  - match: \"^peek$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n",
		"cat "+path+"; ls -A "+folder+" "+filepath.Join(folder, ".mm", "sessions")+"; cat "+filepath.Join(folder, ".mm", "sessions")+"/*.json; echo looked") +
		fmt.Sprintf("  - match: \"^read$\"\n    steps:\n      - toolCalls: [{name: read_file, args: {path: %q}}]\n      - {text: \"read: {{last_tool_output}}\"}\n", path)
}

// tenantsApartAfterRestart: alice works in p1 (a session, saved), mm
// serve restarts, and bob, in p2, peeks: nothing of p1 shows, neither
// her file nor her session's; read_file is refused. Alice, back, sees
// her own.
func tenantsApartAfterRestart(t *testing.T, with string) {
	dir := tenantsDir(t)
	p1, p2 := filepath.Join(dir, "p1"), filepath.Join(dir, "p2")
	mkdirs(t, p1, p2)
	secret := filepath.Join(p1, "plans.txt")
	if err := os.WriteFile(secret, []byte("ALICES-PLANS"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Own(t, p1)
	sandboxtest.Own(t, p2)
	script := peekScript(secret, p1)
	cfg := "sessions:\n  enabled: true\n" + twoTokens + "sandbox:\n  with: " + with + "\n"
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, cfg)
	ctx := testwait.Context(t)
	alice := dialAs(t, s, alicesToken)
	res, err := alice.NewSession(ctx, acp.NewSessionRequest{Cwd: p1, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	a := res.SessionId
	if text := saidIn(t, alice, a, "ping"); !strings.Contains(text, "pong") {
		t.Fatalf("alice's ping: %q", text)
	}

	_ = s.cmd.Process.Kill()
	_ = s.waitExit(t, "killed")
	s = startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, cfg)
	bob := dialAs(t, s, bobsToken)
	res, err = bob.NewSession(ctx, acp.NewSessionRequest{Cwd: p2, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	b := res.SessionId
	text := saidIn(t, bob, b, "peek")
	for _, seen := range []string{"ALICES-PLANS", "\nplans.txt\n", string(a), "pong"} {
		if strings.Contains(text, seen) {
			t.Errorf("bob's command, alice having no live session, saw %q in her folder: %q", seen, text)
		}
	}
	if !strings.Contains(text, "looked") {
		t.Errorf("bob's command did not run to its end: %q", text)
	}
	if text := saidIn(t, bob, b, "read"); strings.Contains(text, "ALICES-PLANS") || !strings.Contains(text, "outside the sandbox") {
		t.Errorf("bob's read_file of alice's file, alice having no live session: %q", text)
	}
	alice = dialAs(t, s, alicesToken)
	if _, err := alice.LoadSession(ctx, acp.LoadSessionRequest{SessionId: a, Cwd: p1, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	if text := saidIn(t, alice, a, "peek"); !strings.Contains(text, "ALICES-PLANS") {
		t.Errorf("alice's command could not read her own folder: %q", text)
	}
}

// TestServeSharedFolders: a folder of serve.sharedFolders is anyone's:
// alice and bob both open sessions in it (and in a folder inside it),
// before and after a restart, and their commands read it; no one may
// open a session in a folder that holds it; alice's own folder stays
// hers, hidden from bob's commands.
func TestServeSharedFolders(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	dir := tenantsDir(t)
	work := filepath.Join(dir, "work")
	shared, p1 := filepath.Join(work, "shared"), filepath.Join(dir, "p1")
	mkdirs(t, filepath.Join(shared, "sub"), p1)
	if err := os.WriteFile(filepath.Join(shared, "notes.txt"), []byte("SHARED-NOTES"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(p1, "plans.txt")
	if err := os.WriteFile(secret, []byte("ALICES-PLANS"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Own(t, shared)
	sandboxtest.Own(t, p1)
	script := serveScript + fmt.Sprintf("  - match: \"^notes$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n",
		"cat "+filepath.Join(shared, "notes.txt")+"; echo; cat "+secret+"; echo looked")
	cfg := "sessions:\n  enabled: true\n" + twoTokens + "  sharedFolders: [" + shared + "]\n"
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, cfg)
	ctx := testwait.Context(t)
	newIn := func(c *serveClient, cwd string) (acp.SessionId, error) {
		res, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		return res.SessionId, err
	}
	alice, bob := dialAs(t, s, alicesToken), dialAs(t, s, bobsToken)
	if _, err := newIn(alice, p1); err != nil {
		t.Fatal(err)
	}
	as, err := newIn(alice, shared)
	if err != nil {
		t.Fatalf("alice's session in the shared folder: %v", err)
	}
	bs, err := newIn(bob, shared)
	if err != nil {
		t.Fatalf("bob's session in the shared folder alice works in: %v", err)
	}
	if _, err := newIn(bob, filepath.Join(shared, "sub")); err != nil {
		t.Errorf("bob's session inside the shared folder: %v", err)
	}
	var re *acp.RequestError
	if _, err := newIn(alice, work); !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Error(), "serve.sharedFolders") {
		t.Errorf("alice's session in a folder that holds a shared one: %v", err)
	}
	if text := saidIn(t, alice, as, "notes"); !strings.Contains(text, "SHARED-NOTES") || !strings.Contains(text, "ALICES-PLANS") {
		t.Errorf("alice's command in the shared folder: %q", text)
	}
	if text := saidIn(t, bob, bs, "notes"); !strings.Contains(text, "SHARED-NOTES") || strings.Contains(text, "ALICES-PLANS") || !strings.Contains(text, "looked") {
		t.Errorf("bob's command in the shared folder, alice's folder hidden: %q", text)
	}

	_ = s.cmd.Process.Kill()
	_ = s.waitExit(t, "killed")
	s = startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, cfg)
	bob = dialAs(t, s, bobsToken)
	bs, err = newIn(bob, shared)
	if err != nil {
		t.Fatalf("bob's session in the shared folder after a restart: %v", err)
	}
	if text := saidIn(t, bob, bs, "notes"); !strings.Contains(text, "SHARED-NOTES") || strings.Contains(text, "ALICES-PLANS") {
		t.Errorf("bob's command in the shared folder after a restart: %q", text)
	}
}

// TestServeRefusesCorruptFolderOwners: a record of the folders' owners
// that mm cannot read stops mm serve at start, saying where and why, and
// is left as it was.
func TestServeRefusesCorruptFolderOwners(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, ".local", "state", "mm")
	mkdirs(t, state)
	owners := filepath.Join(state, "owners.json")
	if err := os.WriteFile(owners, []byte(`{"version": 1, "folders": {"/work/p1": `), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(scriptedModel+twoTokens), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(serveScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testwait.Context(t), mmBin, "serve", "-listen", "127.0.0.1:0", "-config", cfg)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), owners) || !strings.Contains(string(out), "corrupt") {
		t.Errorf("mm serve with a corrupt %s: %v\n%s", owners, err, out)
	}
	if b, _ := os.ReadFile(owners); string(b) != `{"version": 1, "folders": {"/work/p1": ` {
		t.Errorf("the corrupt record was changed: %q", b)
	}
}

// TestServeRefusesASharedFolderOutsideTheRoots: a shared folder must be
// one of the folders the server serves; mm serve says which is not, and
// does not start.
func TestServeRefusesASharedFolderOutsideTheRoots(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(scriptedModel+twoTokens+"  sharedFolders: ["+outside+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(serveScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testwait.Context(t), mmBin, "serve", "-listen", "127.0.0.1:0", "-config", cfg)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "serve.sharedFolders[0]: \""+outside+"\" is outside the folders this server serves") {
		t.Errorf("mm serve with a shared folder outside its roots: %v\n%s", err, out)
	}
}
