package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestShellWords(t *testing.T) {
	t.Setenv("MM_TEST_DIR", "/srv/x")
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`cat .env`, []string{"cat", ".env"}},
		{`cat "./.env" '.e nv' \.env`, []string{"cat", "./.env", ".e nv", ".env"}},
		{`cat<.env>out 2>>err`, []string{"cat", ".env", "out", "2", "err"}},
		{`x=$(cat .env); echo "$x"`, []string{"x=", "cat", ".env", "echo", ""}},
		{`ls # .env is not read`, []string{"ls"}},
		{`cat $MM_TEST_DIR/a "${MM_TEST_DIR}/b" ${MM_TEST_DIR:-y}/c`, []string{"cat", "/srv/x/a", "/srv/x/b", "/srv/x/c"}},
		{"a && b || c | d\nsudo cat /etc/shadow", []string{"a", "b", "c", "d", "sudo", "cat", "/etc/shadow"}},
		{`echo "it\"s" 'unterminated`, []string{"echo", `it"s`, "unterminated"}},
	} {
		var got []string
		for _, w := range shellWords(tc.line) {
			got = append(got, w.text)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestBashNamingASensitivePathAsks: a command whose words name a sensitive
// path must ask, in yolo mode too, as read_file of that path does.
func TestBashNamingASensitivePathAsks(t *testing.T) {
	cwd := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.WriteFile(filepath.Join(cwd, "site.pem"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewSensitive(DefaultSensitive())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command string
		ask     bool
	}{
		{"cat .env", true},
		{`cat "sub dir/.env"`, true},
		{"grep -r TOKEN . --exclude=x < .env.local", true},
		{"docker run --env-file=.env img", true},
		{"FILE=.env ./deploy.sh", true},
		{"cat ~/.ssh/id_rsa", true},
		{"cat $HOME/.aws/credentials", true},
		{"openssl x509 -in *.pem -noout", true}, // the glob matches site.pem
		{"echo $(cat .netrc)", true},
		{"ls -la && go test ./...", false},
		{"cat .envrc README.md", false},
		{"echo hello # cat .env", false},
	} {
		c, err := Prepare(Env{Cwd: cwd}, "bash", `{"command":`+jsonString(tc.command)+`}`)
		if err != nil {
			t.Fatal(err)
		}
		ask, why := c.AlwaysAsk(s, cwd)
		if ask != tc.ask {
			t.Errorf("%s: ask %v (%s), want %v", tc.command, ask, why, tc.ask)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
