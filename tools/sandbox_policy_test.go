package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mm-agent/mm/sandbox"
)

// TestFileToolsObeyTheSandbox: mm's own file tools refuse what the
// session's sandbox refuses its commands, as a result the model reads: a
// hidden path (through a link too), any write in read-only, and a write
// outside the session's folder in workspace-write.
func TestFileToolsObeyTheSandbox(t *testing.T) {
	base := t.TempDir()
	cwd, beside, secret := filepath.Join(base, "cwd"), filepath.Join(base, "beside"), filepath.Join(base, "ssh")
	sessions := filepath.Join(cwd, ".mm", "sessions")
	mustWrite(t, filepath.Join(cwd, "in.txt"), "inside\n")
	mustWrite(t, filepath.Join(sessions, "other.json"), "{}")
	mustWrite(t, filepath.Join(secret, "id_ed25519"), "PRIVATE\n")
	mustWrite(t, filepath.Join(beside, "b.txt"), "beside\n")
	if err := os.Symlink(secret, filepath.Join(cwd, "keys")); err != nil {
		t.Fatal(err)
	}
	policy := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Network: true, Writable: []string{cwd}, Hidden: []string{secret, sessions}}
	ws := Env{Cwd: cwd, Sandbox: policy}
	ro := ws
	ro.Sandbox.Mode = sandbox.ReadOnly
	// tools.sensitive's matches, at any depth, and .git with
	// sandbox.protectGit, stay read-only in workspace-write.
	mustWrite(t, filepath.Join(cwd, "svc", ".env"), "TOKEN=1\n")
	mustWrite(t, filepath.Join(cwd, ".git", "config"), "[core]\n")
	guarded := ws
	guarded.Sandbox.Protected = []string{".env", "*.pem", ".git/**"}
	cases := []struct {
		env        Env
		tool, args string
		refused    string // "" when it must run
	}{
		{ws, "read_file", `{"path":"in.txt"}`, ""},
		{ws, "read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(beside, "b.txt")), ""},
		{ws, "write_file", `{"path":"new.txt","content":"x"}`, ""},
		{ws, "read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(secret, "id_ed25519")), "is hidden from this session's tools"},
		{ws, "read_file", `{"path":"keys/id_ed25519"}`, "is hidden from this session's tools"},
		{ws, "read_file", `{"path":".mm/sessions/other.json"}`, "is hidden from this session's tools"},
		{ws, "write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(beside, "made.txt")), "workspace-write lets the session write only in"},
		{ws, "edit_file", fmt.Sprintf(`{"path":%q,"old_text":"beside","new_text":"mine"}`, filepath.Join(beside, "b.txt")), "workspace-write lets the session write only in"},
		{ws, "fetch_content", fmt.Sprintf(`{"url":"http://127.0.0.1:1/","output":%q}`, filepath.Join(beside, "page.md")), "workspace-write lets the session write only in"},
		{guarded, "write_file", `{"path":"svc/.env","content":"TOKEN=2"}`, "keeps"},
		{guarded, "write_file", `{"path":"site.pem","content":"x"}`, "keeps"},
		{guarded, "edit_file", `{"path":".git/config","old_text":"core","new_text":"x"}`, "keeps"},
		{guarded, "read_file", `{"path":"svc/.env"}`, ""},
		{guarded, "write_file", `{"path":"gitignore.txt","content":"x"}`, ""},
		{ws, "write_file", `{"path":".git/description","content":"x"}`, ""},
		{ro, "read_file", `{"path":"in.txt"}`, ""},
		{ro, "write_file", `{"path":"ro.txt","content":"x"}`, "the session is read-only"},
		{ro, "edit_file", `{"path":"in.txt","old_text":"inside","new_text":"mine"}`, "the session is read-only"},
	}
	for _, k := range cases {
		c, err := Prepare(k.env, k.tool, k.args)
		if k.refused == "" {
			if err != nil {
				t.Errorf("%s %s in %s: %v", k.tool, k.args, k.env.Sandbox.Mode, err)
				continue
			}
			if res := Run(context.Background(), k.env, c); res.Failed {
				t.Errorf("%s %s in %s: %+v", k.tool, k.args, k.env.Sandbox.Mode, res)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "[outside the sandbox: ") || !strings.Contains(err.Error(), k.refused) {
			t.Errorf("%s %s in %s prepared: %v, want %q", k.tool, k.args, k.env.Sandbox.Mode, err, k.refused)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(beside, "b.txt")); string(b) != "beside\n" {
		t.Errorf("the file beside was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(cwd, "ro.txt")); err == nil {
		t.Error("read-only wrote a file")
	}
}
