package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/tcptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/sandbox"
	"github.com/mm-agent/mm/sandbox/sandboxtest"
)

// TestServeConfinesCommands: mm serve, its sandbox.mode left empty, runs a
// tenant's bash confined to workspace-write with bubblewrap. The command
// writes its cwd, but not a folder beside it; it cannot read ~/.ssh, the
// config that holds the tokens, nor the session files in its cwd (another
// tenant's among them); with sandbox.protectGit, it cannot change .git.
// The banner and the session's log say the policy.
func TestServeConfinesCommands(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	dir := t.TempDir()
	for path, text := range map[string]string{
		".ssh/id_ed25519":                 "PRIVATE-KEY",
		"project/.mm/sessions/other.json": "ANOTHER-TENANTS-HISTORY",
		"project/.env":                    "TOKEN=kept\n",
		"project/.git/HEAD":               "ref: refs/heads/main\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Run by root, mm runs the command as sandbox.user: every file here is
	// that user's, so that what keeps the command from them is the
	// sandbox, not their owner.
	sandboxtest.Own(t, dir)
	command := fmt.Sprintf("echo in > inside; echo changed > .env; echo changed > .git/HEAD; echo out > %s; cat %s %s .mm/sessions/other.json; echo done",
		filepath.Join(dir, "escaped"), filepath.Join(dir, ".ssh", "id_ed25519"), filepath.Join(dir, "config.yaml"))
	script := serveScript + fmt.Sprintf("  - match: \"^confined$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", command)
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, "sandbox:\n  protectGit: true\n", "MM_SERVE_TOKEN="+serveToken)
	if !strings.Contains(s.stderr.String(), "sandbox: workspace-write, network on, with bubblewrap") {
		t.Errorf("the banner does not say the policy:\n%s", s.stderr.String())
	}
	ctx := testwait.Context(t)
	w := s.wire(t)
	project := filepath.Join(dir, "project")
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: project, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.ask(ctx, res.SessionId, "confined"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the confined turn: %v %v", r, err)
	}
	text := acptest.Text(w.rec.Updates(res.SessionId))
	if !strings.Contains(text, "done") {
		t.Fatalf("the command did not run to its end: %q", text)
	}
	for _, secret := range []string{"PRIVATE-KEY", "ANOTHER-TENANTS-HISTORY", "provider: scripted"} {
		if strings.Contains(text, secret) {
			t.Errorf("the confined command read %q: %q", secret, text)
		}
	}
	if b, err := os.ReadFile(filepath.Join(project, "inside")); err != nil || string(b) != "in\n" {
		t.Errorf("the cwd was not written: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(project, ".env")); string(b) != "TOKEN=kept\n" {
		t.Errorf("a tools.sensitive file in the cwd was changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(project, ".git", "HEAD")); string(b) != "ref: refs/heads/main\n" {
		t.Errorf(".git was changed with sandbox.protectGit: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); err == nil {
		t.Error("the command wrote outside its cwd")
	}
	if !strings.Contains(s.stderr.String(), "session "+string(res.SessionId)+": commands confined: workspace-write, network on (bubblewrap)") {
		t.Errorf("the session did not log its policy:\n%s", s.stderr.String())
	}
}

// TestServeConfinesWithTheDefaultConfig: mm serve's config at its default
// place, ~/.config/mm/config.yaml, inside ~/.config/mm, both hidden from
// confined commands: with bubblewrap, bash runs (the file's mount inside
// the folder hidden read-only made every command fail), and sees neither.
func TestServeConfinesWithTheDefaultConfig(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	dir := sandboxtest.Own(t, t.TempDir())
	config := filepath.Join(dir, defaultConfig)
	command := fmt.Sprintf("cat %s; ls -A %s; echo ran", config, filepath.Dir(config))
	script := serveScript + fmt.Sprintf("  - match: \"^look$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", command)
	s := startServeModel(t, mmBin, dir, defaultConfig, scriptedModel, script, "serve:\n  roots: [\"~\"]\n", "MM_SERVE_TOKEN="+serveToken)
	if !strings.Contains(s.stderr.String(), "config "+config) {
		t.Fatalf("mm serve did not read the config at its default place:\n%s", s.stderr.String())
	}
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.ask(ctx, res.SessionId, "look"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("look: %v %v", r, err)
	}
	text := acptest.Text(w.rec.Updates(res.SessionId))
	if !strings.Contains(text, "ran") {
		t.Fatalf("bash did not run: %q", text)
	}
	if strings.Contains(text, "provider: scripted") || strings.Contains(text, "script.yaml") {
		t.Errorf("the command read mm's config folder: %q", text)
	}
}

// TestServeSandboxOption: the session's sandbox is a config option over
// ACP, with the modes no wider than the server's (read-only and
// workspace-write by default), its policy in the response's _meta. Set to
// read-only mid-session, the next command cannot write the cwd; set back,
// it can; full, which the server does not offer, is refused.
func TestServeSandboxOption(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	script := serveScript + "  - match: \"^write$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: \"echo x > written && echo wrote\"}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n"
	dir := t.TempDir()
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, "", "MM_SERVE_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	var opt *acp.SessionConfigOptionSelect
	for _, o := range res.ConfigOptions {
		if o.Select != nil && o.Select.Id == "sandbox" {
			opt = o.Select
		}
	}
	if opt == nil || opt.CurrentValue != "workspace-write" || opt.Options.Ungrouped == nil || len(*opt.Options.Ungrouped) != 2 {
		t.Fatalf("session/new's sandbox option: %+v", opt)
	}
	meta, _ := res.Meta["mm.sandbox"].(map[string]any)
	if meta["mode"] != "workspace-write" || meta["network"] != true || meta["with"] != "bubblewrap" {
		t.Errorf("session/new's _meta: %v", res.Meta)
	}
	set := func(v string) error {
		_, err := w.SetSessionConfigOption(ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
			SessionId: res.SessionId, ConfigId: "sandbox", Value: acp.SessionConfigValueId(v)}})
		return err
	}
	wrote := func() bool {
		t.Helper()
		before := len(w.rec.Updates(res.SessionId))
		if r, err := w.ask(ctx, res.SessionId, "write"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("write: %v %v", r, err)
		}
		return strings.Contains(acptest.Text(w.rec.Updates(res.SessionId)[before:]), "bash said: wrote")
	}
	if err := set("read-only"); err != nil {
		t.Fatal(err)
	}
	if wrote() {
		t.Error("a read-only session's command wrote its cwd")
	}
	if err := set("workspace-write"); err != nil {
		t.Fatal(err)
	}
	if !wrote() {
		t.Error("a workspace-write session's command could not write its cwd")
	}
	if err := set("full"); err == nil || !strings.Contains(err.Error(), "not offered here") {
		t.Errorf("full on a server that does not offer it: %v", err)
	}
}

// TestServeTenantsDoNotSeeEachOther: two tokens of one mm serve, each with
// a session in a folder of its own under serve.roots. Bob's confined bash
// and his read_file see nothing of Alice's folder while her session is
// live; Alice's own command reads it.
func TestServeTenantsDoNotSeeEachOther(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	tenantsApart(t, "bubblewrap")
}

// TestServeTenantsDoNotSeeEachOtherLandlock: the same with Landlock
// (sandbox.with: landlock), which hides a path by granting everything
// around it.
func TestServeTenantsDoNotSeeEachOtherLandlock(t *testing.T) {
	testwait.Short(t, "mm serve with Landlock")
	if s := sandbox.LandlockOnly(); s.Kind() != sandbox.Landlock {
		if os.Getenv("MM_REQUIRE_LANDLOCK") == "1" {
			t.Fatalf("%s, and MM_REQUIRE_LANDLOCK=1", s.Why())
		}
		t.Skip(s.Why())
	}
	tenantsApart(t, "landlock")
}

// tenantsApart: two tokens' sessions in folders side by side; bob's bash
// and read_file cannot read alice's folder, alice's can.
func tenantsApart(t *testing.T, with string) {
	// Outside /tmp, which a confined command sees as its own and empty
	// anyway: the folders must be hidden by name. Run by root, outside
	// root's home, which the commands' user could not search anyway.
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
	alicesDir, bobsDir := filepath.Join(dir, "alice"), filepath.Join(dir, "bob")
	for _, d := range []string{alicesDir, bobsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(alicesDir, "plans.txt")
	if err := os.WriteFile(secret, []byte("ALICES-PLANS"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Own(t, alicesDir)
	sandboxtest.Own(t, bobsDir)
	script := serveScript + fmt.Sprintf("  - match: \"^peek$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", "cat "+secret+"; ls -A "+alicesDir+"; echo looked") +
		fmt.Sprintf("  - match: \"^read$\"\n    steps:\n      - toolCalls: [{name: read_file, args: {path: %q}}]\n      - {text: \"read: {{last_tool_output}}\"}\n", secret)
	tokens := "serve:\n  tokens:\n    - {name: alice, token: alice-token-0123456789}\n    - {name: bob, token: bob-token-0123456789ab}\nsandbox:\n  with: " + with + "\n"
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, tokens)
	ctx := testwait.Context(t)
	session := func(w *serveClient, cwd string) acp.SessionId {
		res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		return res.SessionId
	}
	said := func(w *serveClient, sid acp.SessionId, prompt string) string {
		t.Helper()
		before := len(w.rec.Updates(sid))
		if r, err := w.ask(ctx, sid, prompt); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("%s: %v %v", prompt, r, err)
		}
		return acptest.Text(w.rec.Updates(sid)[before:])
	}
	alice, bob := dialAs(t, s, "alice-token-0123456789"), dialAs(t, s, "bob-token-0123456789ab")
	a, b := session(alice, alicesDir), session(bob, bobsDir)
	if text := said(bob, b, "peek"); strings.Contains(text, "ALICES-PLANS") || strings.Contains(text, "plans.txt\n") || !strings.Contains(text, "looked") {
		t.Errorf("bob's command saw alice's folder: %q", text)
	}
	if text := said(bob, b, "read"); strings.Contains(text, "ALICES-PLANS") || !strings.Contains(text, "outside the sandbox") {
		t.Errorf("bob's read_file of alice's file: %q", text)
	}
	if text := said(alice, a, "peek"); !strings.Contains(text, "ALICES-PLANS") {
		t.Errorf("alice's command could not read her own folder: %q", text)
	}
	if log := s.stderr.String(); !strings.Contains(log, "with "+with) {
		t.Errorf("the banner does not say the commands are confined with %s:\n%s", with, log)
	}
}

// TestServeRefusesAMissingSandbox: sandbox.with names a way this machine
// lacks (bubblewrap off PATH), and mm serve says so and does not start,
// rather than serve its tenants unconfined.
func TestServeRefusesAMissingSandbox(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(scriptedModel+"sandbox:\n  with: bubblewrap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(serveScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testwait.Context(t), mmBin, "serve", "-listen", "127.0.0.1:0", "-config", cfg)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + dir, "MM_SERVE_TOKEN=" + serveToken}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "sandbox.with is bubblewrap, and it cannot confine commands here: bubblewrap (bwrap) is not on PATH") {
		t.Errorf("mm serve with sandbox.with: bubblewrap and no bwrap: %v\n%s", err, out)
	}
}

// TestServeAdditionalDirectories: mm advertises
// sessionCapabilities.additionalDirectories, and a session's commands
// write the additional directories it was given as they write its cwd,
// and not a folder it was not given.
func TestServeAdditionalDirectories(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	dir := t.TempDir()
	cwd, extra, other := filepath.Join(dir, "cwd"), filepath.Join(dir, "extra"), filepath.Join(dir, "other")
	script := serveScript
	for _, d := range []string{cwd, extra, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		script += fmt.Sprintf("  - match: \"^write %s$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: \"echo x > %s/made && echo wrote\"}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", filepath.Base(d), d)
		sandboxtest.Own(t, d)
	}
	s := startServeModel(t, mmBin, dir, "config.yaml", scriptedModel, script, "", "MM_SERVE_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	w := s.wire(t)
	if !strings.Contains(w.read.String(), `"additionalDirectories":{}`) {
		t.Errorf("additionalDirectories is not advertised: %s", w.read.String())
	}
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, AdditionalDirectories: []string{extra}, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"extra", "other"} {
		if r, err := w.Prompt(ctx, acp.PromptRequest{SessionId: res.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("write " + d)}}); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("write %s: %v %v", d, r, err)
		}
	}
	if _, err := os.Stat(filepath.Join(extra, "made")); err != nil {
		t.Errorf("the additional directory was not written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "made")); err == nil {
		t.Error("a folder the session was not given was written")
	}
}

// TestServeNetworkOption: the sandbox's network is a session option
// ("network", a select of off and on for a client that does not show
// booleans): set off mid-session, the next command cannot open a TCP
// connection to the outside (an address of this machine's that is not
// loopback, through the session's own network); set on again, it can; the
// _meta says it. A server whose sandbox.network is false offers off only,
// and refuses on.
func TestServeNetworkOption(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	host, port, _ := net.SplitHostPort(tcptest.Outside(t))
	dial := fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && echo connected || echo refused", host, port)
	script := serveScript + fmt.Sprintf("  - match: \"^dial$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: %q}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n", dial)
	s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, script, "", "MM_SERVE_TOKEN="+serveToken)
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	network := func(opts []acp.SessionConfigOption) *acp.SessionConfigOptionSelect {
		for _, o := range opts {
			if o.Select != nil && o.Select.Id == "network" {
				return o.Select
			}
		}
		return nil
	}
	if o := network(res.ConfigOptions); o == nil || o.CurrentValue != "on" || o.Options.Ungrouped == nil || len(*o.Options.Ungrouped) != 2 {
		t.Fatalf("session/new's network option: %+v", o)
	}
	set := func(v string) (acp.SetSessionConfigOptionResponse, error) {
		return w.SetSessionConfigOption(ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
			SessionId: res.SessionId, ConfigId: "network", Value: acp.SessionConfigValueId(v)}})
	}
	said := func() string {
		t.Helper()
		before := len(w.rec.Updates(res.SessionId))
		if r, err := w.ask(ctx, res.SessionId, "dial"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("dial: %v %v", r, err)
		}
		return acptest.Text(w.rec.Updates(res.SessionId)[before:])
	}
	if text := said(); !strings.Contains(text, "connected") {
		t.Errorf("with the network on: %q", text)
	}
	r, err := set("off")
	if err != nil {
		t.Fatal(err)
	}
	if o := network(r.ConfigOptions); o == nil || o.CurrentValue != "off" {
		t.Errorf("set_config_option's network option: %+v", o)
	}
	if meta, _ := r.Meta["mm.sandbox"].(map[string]any); meta["network"] != false {
		t.Errorf("set_config_option's _meta: %v", r.Meta)
	}
	if text := said(); strings.Contains(text, "connected") {
		t.Errorf("with the network off, the command connected: %q", text)
	}
	if _, err := set("on"); err != nil {
		t.Fatal(err)
	}
	if text := said(); !strings.Contains(text, "connected") {
		t.Errorf("with the network on again: %q", text)
	}

	off := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, script, "sandbox:\n  network: false\n", "MM_SERVE_TOKEN="+serveToken)
	w2 := off.wire(t)
	res2, err := w2.NewSession(ctx, acp.NewSessionRequest{Cwd: off.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if o := network(res2.ConfigOptions); o == nil || o.CurrentValue != "off" || len(*o.Options.Ungrouped) != 1 {
		t.Errorf("a server without the network offers: %+v", o)
	}
	_, err = w2.SetSessionConfigOption(ctx, acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: res2.SessionId, ConfigId: "network", Value: "on"}})
	if err == nil || !strings.Contains(err.Error(), "sandbox.network: false") {
		t.Errorf("turning the network on where the server has it off: %v", err)
	}
}

// TestServeKilledLeavesNoNetworkFiles: a session's own network, made by
// its first command with the network on, leaves nothing in mm serve's
// temporary folder, even when mm is killed (a crash, the OOM killer, a
// container stopped hard) and removes nothing itself: its holder and
// slirp4netns end with mm, and so must what it wrote for them. Each
// command's /etc/resolv.conf still names the network's DNS server, the
// .3 of its own network. A resolv.conf in an mm-net-* folder of TMPDIR
// outlived every killed mm, about thirty a run of these tests.
func TestServeKilledLeavesNoNetworkFiles(t *testing.T) {
	testwait.Short(t, "mm serve with bubblewrap")
	sandboxtest.Bubblewrap(t)
	tmp := t.TempDir()
	script := serveScript + "  - match: \"^resolv$\"\n    steps:\n      - toolCalls: [{name: bash, args: {command: \"cat /etc/resolv.conf\"}}]\n      - {text: \"bash said: {{last_tool_output}}\"}\n"
	s := startServeModel(t, mmBin, t.TempDir(), "config.yaml", scriptedModel, script, "", "MM_SERVE_TOKEN="+serveToken, "TMPDIR="+tmp)
	ctx := testwait.Context(t)
	w := s.wire(t)
	res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(t), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.ask(ctx, res.SessionId, "resolv"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the turn: %v %v", r, err)
	}
	text := acptest.Text(w.rec.Updates(res.SessionId))
	if !regexp.MustCompile(`nameserver \d+\.\d+\.\d+\.3\b`).MatchString(text) {
		t.Errorf("the command's resolv.conf does not name its network's DNS server: %q", text)
	}
	_ = s.cmd.Process.Kill()
	_ = s.waitExit(t, "killed")
	if left, _ := filepath.Glob(filepath.Join(tmp, "mm-net-*")); len(left) > 0 {
		t.Errorf("a killed mm serve left its sessions' network files behind: %v", left)
	}
}
