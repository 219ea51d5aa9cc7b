package protocol_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

// TestFolderClaimedMidSession: bob's session is live when alice opens her
// first session in a folder: from then on, bob's read_file of a file
// there is refused, and his @mention of it is not attached (what other
// tokens own is asked of the store at each call, not when a session
// starts). mm -acp's user (the owner "") opens a session in alice's
// folder, and claims nothing.
func TestFolderClaimedMidSession(t *testing.T) {
	root := t.TempDir()
	alices, bobs := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{alices, bobs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(alices, "plans.txt")
	if err := os.WriteFile(secret, []byte("ALICES-PLANS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	peek := fmt.Sprintf(`
rules:
  - match: "^peek"
    steps:
      - toolCalls: [{name: read_file, args: {path: %q}}]
      - {text: "it said: {{last_tool_output}}"}
`, secret)
	e := newHubEnvScript(t, peek, func(c *configs.Config) { c.Sessions.Enabled = true })
	alice, bob := e.client("alice", root), e.client("bob", root)
	open := func(c *acptest.Conn, cwd string) (acp.SessionId, error) {
		res, err := c.NewSession(e.ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		return res.SessionId, err
	}
	b, err := open(bob, bobs)
	if err != nil {
		t.Fatal(err)
	}
	said := func(prompt string) string {
		t.Helper()
		before := len(bob.Client.Updates(b))
		if r, err := bob.Ask(e.ctx, b, prompt); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("%s: %v %v", prompt, r, err)
		}
		return acptest.Text(bob.Client.Updates(b)[before:])
	}
	if text := said("peek"); !strings.Contains(text, "ALICES-PLANS") {
		t.Fatalf("bob's read_file of a folder no one owns yet: %q", text)
	}
	if _, err := open(alice, alices); err != nil {
		t.Fatal(err)
	}
	if text := said("peek @" + secret); strings.Contains(text, "ALICES-PLANS") || !strings.Contains(text, "outside the sandbox: "+secret+" is hidden") {
		t.Errorf("bob's read_file in alice's folder, claimed since his session started: %q", text)
	}
	if last, _ := json.Marshal(e.server.LastRequest()); strings.Contains(string(last), "attached file: "+secret) {
		t.Error("bob's @mention of a file in alice's folder was attached")
	}
	var re *acp.RequestError
	if _, err := open(bob, alices); !errors.As(err, &re) || re.Code != -32602 || strings.Contains(re.Error(), "alice") {
		t.Errorf("bob's session in alice's folder: %v", err)
	}

	// The owner "" (mm -acp's user) owns every folder and claims none.
	op := e.client("")
	if _, err := open(op, alices); err != nil {
		t.Errorf("the owner \"\" in alice's folder: %v", err)
	}
	if _, err := open(op, filepath.Join(root)); err != nil {
		t.Errorf("the owner \"\" in a folder that holds alice's and bob's: %v", err)
	}
	if got, err := e.hub.Store().FoldersNotOf(e.ctx, "carol"); err != nil || !slices.Equal(got, []string{alices, bobs}) {
		t.Errorf("the folders recorded: %v, %v; want alice's and bob's only", got, err)
	}
}

// TestForkChecksAdditionalDirectories: session/fork takes
// additionalDirectories as session/new does (issue 42: it dropped them
// silently): one outside the roots is refused, naming them, and one
// another token owns is refused without naming the owner.
func TestForkChecksAdditionalDirectories(t *testing.T) {
	root := t.TempDir()
	alices, bobs := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{alices, bobs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := newHubEnv(t, nil)
	alice, bob := e.client("alice", root), e.client("bob", root)
	if _, err := alice.NewSession(e.ctx, acp.NewSessionRequest{Cwd: alices, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	res, err := bob.NewSession(e.ctx, acp.NewSessionRequest{Cwd: bobs, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	fork := func(dirs ...string) error {
		_, err := bob.UnstableForkSession(e.ctx, acp.UnstableForkSessionRequest{SessionId: res.SessionId, Cwd: bobs, AdditionalDirectories: dirs})
		return err
	}
	var re *acp.RequestError
	if err := fork(t.TempDir()); !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Error(), "serve.roots") {
		t.Errorf("a fork's additional directory outside the roots: %v", err)
	}
	if err := fork(alices); !errors.As(err, &re) || re.Code != -32602 || !strings.Contains(re.Error(), "another token's folder") || strings.Contains(re.Error(), "alice") {
		t.Errorf("a fork's additional directory in alice's folder: %v", err)
	}
	if err := fork(filepath.Join(bobs)); err != nil {
		t.Errorf("a fork's additional directory in bob's own folder: %v", err)
	}
}
