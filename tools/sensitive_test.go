package tools

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSensitiveDefaults(t *testing.T) {
	s, err := NewSensitive(DefaultSensitive())
	if err != nil {
		t.Fatal(err)
	}
	cwd := "/work/proj"
	tests := []struct {
		path string
		want bool
	}{
		{"/work/proj/.env", true},
		{"/work/proj/.env.local", true},
		{"/work/proj/deep/down/.env.production", true},
		{"/elsewhere/.env", true},
		{"/work/proj/.ENV", true}, // case is ignored
		{"/work/proj/.envrc", false},
		{"/work/proj/env", false},
		{"/work/proj/main.go", false},
		{"/home/u/.ssh/id_rsa", true},
		{"/home/u/.ssh/config", true},
		{"/home/u/.ssh/sub/deeper", true},
		{"/home/u/.ssh", true}, // ** also matches no component
		{"/work/proj/.ssh/known_hosts", true},
		{"/work/proj/ssh/known_hosts", false},
		{"/work/proj/keys/id_rsa.pub", true},
		{"/work/proj/keys/id_ed25519", true},
		{"/work/proj/tls/site.pem", true},
		{"/work/proj/tls/site.key", true},
		{"/work/proj/tls/site.keys", false},
		{"/work/proj/keyboard.go", false},
		{"/home/u/.aws/credentials", true},
		{"/home/u/.netrc", true},
		{"/home/u/.netrc.bak", false},
	}
	for _, tt := range tests {
		if got := s.Match(cwd, tt.path); got != tt.want {
			t.Errorf("Match(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestSensitivePatterns(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory:", err)
	}
	s, err := NewSensitive([]string{"config/secrets.yaml", "**/private/*.txt", "/build/**", "/etc/shadow", "~/.kube/**", "vault/**/token"})
	if err != nil {
		t.Fatal(err)
	}
	cwd := "/work/proj"
	tests := []struct {
		path string
		want bool
	}{
		{"/work/proj/config/secrets.yaml", true},
		{"/work/proj/app/config/secrets.yaml", true},
		{"/other/config/secrets.yaml", true},
		{"/work/proj/config/secrets.yaml.bak", false},
		{"/work/proj/private/a.txt", true},
		{"/work/proj/x/private/a.txt", true},
		{"/work/proj/private/sub/a.txt", false},
		{"/work/proj/build/out/bin", true},      // anchored to the cwd
		{"/work/proj/src/build/out/bin", false}, // not at the cwd's root
		{"/etc/shadow", true},                   // anchored as an absolute path
		{"/work/proj/etc/shadow", true},         // and relative to the cwd
		{"/backup/etc/shadow", false},
		{filepath.Join(home, ".kube", "config"), true},
		{"/work/proj/.kube/config", false},
		{"/work/proj/vault/token", true},
		{"/work/proj/vault/a/b/token", true},
		{"/work/proj/vault/a/b/token2", false},
	}
	for _, tt := range tests {
		if got := s.Match(cwd, tt.path); got != tt.want {
			t.Errorf("Match(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestSensitiveBadPatterns(t *testing.T) {
	for _, p := range []string{"", "  ", "/", "a//b", "[unclosed"} {
		if _, err := NewSensitive([]string{p}); err == nil {
			t.Errorf("NewSensitive(%q): no error", p)
		}
	}
	var nilSensitive *Sensitive
	if nilSensitive.Match("/w", "/w/.env") {
		t.Error("a nil *Sensitive matched")
	}
	empty, err := NewSensitive(nil)
	if err != nil || empty.Match("/w", "/w/.env") {
		t.Errorf("an empty list matched or failed: %v", err)
	}
}

// TestSensitiveSymlink checks that a harmless name pointing at a secret
// is caught by the file it leads to.
func TestSensitiveSymlink(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "home", ".ssh", "id_rsa")
	mustWrite(t, secret, "KEY")
	link := filepath.Join(root, "proj", "notes.txt")
	mustMkdir(t, filepath.Dir(link))
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	s, _ := NewSensitive(DefaultSensitive())
	if !s.Match(filepath.Join(root, "proj"), link) {
		t.Error("a link to ~/.ssh/id_rsa was not sensitive")
	}
}

func TestCallAlwaysAsk(t *testing.T) {
	root := t.TempDir()
	cwd := filepath.Join(root, "proj")
	mustWrite(t, filepath.Join(cwd, ".env"), "SECRET=1\n")
	mustWrite(t, filepath.Join(cwd, "main.go"), "package main\n")
	mustWrite(t, filepath.Join(root, "outside.txt"), "x\n")
	env := Env{Cwd: cwd}
	s, err := NewSensitive(DefaultSensitive())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool, args string
		want             bool
		reason           string
	}{
		{"bash naming a sensitive path", "bash", `{"command":"cat .env"}`, true, "the command names a sensitive path: " + filepath.Join(cwd, ".env")},
		{"bash is not checked for writing outside", "bash", `{"command":"echo x > ../o.txt"}`, false, ""},
		{"plain read", "read_file", `{"path":"main.go"}`, false, ""},
		{"read outside is fine", "read_file", `{"path":"../outside.txt"}`, false, ""},
		{"sensitive read", "read_file", `{"path":".env"}`, true, "reads a sensitive path: " + filepath.Join(cwd, ".env")},
		{"plain write", "write_file", `{"path":"new/a.go","content":"x"}`, false, ""},
		{"sensitive write", "write_file", `{"path":".env","content":"x"}`, true, "writes a sensitive path: " + filepath.Join(cwd, ".env")},
		{"write outside", "write_file", `{"path":"../outside.txt","content":"y"}`, true, "writes outside the working directory: " + filepath.Join(root, "outside.txt")},
		{"edit outside", "edit_file", `{"path":"../outside.txt","old_text":"x","new_text":"y"}`, true, "writes outside the working directory: " + filepath.Join(root, "outside.txt")},
		{"plain edit", "edit_file", `{"path":"main.go","old_text":"main","new_text":"app"}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Prepare(env, tt.tool, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			got, reason := c.AlwaysAsk(s, cwd)
			if got != tt.want || reason != tt.reason {
				t.Errorf("AlwaysAsk = %v %q, want %v %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}
