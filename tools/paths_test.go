package tools

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTranslatePath(t *testing.T) {
	tests := []struct{ in, want string }{
		// WSL UNC paths, both host names, every separator style.
		{`\\wsl.localhost\Ubuntu\home\u\x`, "/home/u/x"},
		{`\\wsl$\Ubuntu\home\u\x`, "/home/u/x"},
		{`//wsl.localhost/Ubuntu/home/u/x`, "/home/u/x"},
		{`//wsl$/Ubuntu/home/u/x`, "/home/u/x"},
		{`\\wsl.localhost/Ubuntu\home/u\x`, "/home/u/x"},
		{`\\WSL.LOCALHOST\Ubuntu-22.04\home\u\x`, "/home/u/x"},
		{`\\WSL$\Debian\etc`, "/etc"},
		{`\\wsl.localhost\Ubuntu\home\u\x\`, "/home/u/x"},
		{`\\wsl.localhost\Ubuntu\home\u\x\\`, "/home/u/x"},
		{`\\wsl.localhost\Ubuntu`, "/"},
		{`\\wsl.localhost\Ubuntu\`, "/"},
		{`\\wsl.localhost\Ubuntu\home\u\my project\a.go`, "/home/u/my project/a.go"},
		{`\\?\UNC\wsl.localhost\Ubuntu\home\u`, "/home/u"},
		// Without a distribution it names no Linux path.
		{`\\wsl.localhost`, `\\wsl.localhost`},
		{`\\wsl.localhost\`, `\\wsl.localhost\`},
		// Drive paths.
		{`E:\Projects\x`, "/mnt/e/Projects/x"},
		{`e:\Projects\x`, "/mnt/e/Projects/x"},
		{`E:/Projects/x`, "/mnt/e/Projects/x"},
		{`E:\Projects\x\`, "/mnt/e/Projects/x"},
		{`E:/Projects/x/`, "/mnt/e/Projects/x"},
		{`C:\`, "/mnt/c"},
		{`C:/`, "/mnt/c"},
		{`C:`, "/mnt/c"},
		{`c:\Users\Me\My Documents\a b.txt`, "/mnt/c/Users/Me/My Documents/a b.txt"},
		{`Z:\a\..\b`, "/mnt/z/b"},
		{`\\?\C:\Windows`, "/mnt/c/Windows"},
		{`\\.\D:\data`, "/mnt/d/data"},
		// Left alone: Linux paths, relative paths, other UNC hosts,
		// drive-relative paths, things that only look similar.
		{"/home/u/x", "/home/u/x"},
		{"/home/u/x/", "/home/u/x/"},
		{"/mnt/c/x", "/mnt/c/x"},
		{"rel/path", "rel/path"},
		{"", ""},
		{"~/x", "~/x"},
		{`\\server\share\x`, `\\server\share\x`},
		{`//server/share/x`, `//server/share/x`},
		{`C:relative`, `C:relative`},
		{`1:\x`, `1:\x`},
		{`EE:\x`, `EE:\x`},
		{`\\?\Volume{abc}\x`, `\\?\Volume{abc}\x`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := TranslatePath(tt.in); got != tt.want {
				t.Errorf("TranslatePath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory:", err)
	}
	tests := []struct{ cwd, in, want string }{
		{"/work/p", "a.go", "/work/p/a.go"},
		{"/work/p", "./sub/../a.go", "/work/p/a.go"},
		{"/work/p", "../q/a.go", "/work/q/a.go"},
		{"/work/p", "/etc/hosts", "/etc/hosts"},
		{"/work/p", "/etc//hosts/", "/etc/hosts"},
		{"/work/p", "~", home},
		{"/work/p", "~/notes.md", filepath.Join(home, "notes.md")},
		{"/work/p", "~other/x", "/work/p/~other/x"},
		{"/work/p", `E:\Projects\x`, "/mnt/e/Projects/x"},
		{"/work/p", `\\wsl$\Ubuntu\home\u\x`, "/home/u/x"},
		{`\\wsl.localhost\Ubuntu\home\u`, "src/a.go", "/home/u/src/a.go"},
		{"/work/p", "", "/work/p"},
		{"/work/p", ".", "/work/p"},
	}
	for _, tt := range tests {
		if got := Resolve(tt.cwd, tt.in); got != tt.want {
			t.Errorf("Resolve(%q, %q) = %q, want %q", tt.cwd, tt.in, got, tt.want)
		}
	}
}

func TestOutside(t *testing.T) {
	root := t.TempDir()
	cwd := filepath.Join(root, "proj")
	other := filepath.Join(root, "other")
	mustMkdir(t, filepath.Join(cwd, "sub"))
	mustMkdir(t, other)
	// A link inside the cwd that leads out, and one outside that leads in.
	if err := os.Symlink(other, filepath.Join(cwd, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(cwd, "sub"), filepath.Join(root, "inward")); err != nil {
		t.Fatal(err)
	}
	// A cwd reached through a link is still the same directory.
	if err := os.Symlink(cwd, filepath.Join(root, "projlink")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cwd, path string
		want      bool
	}{
		{cwd, cwd, false},
		{cwd, filepath.Join(cwd, "a.go"), false},
		{cwd, filepath.Join(cwd, "sub", "new", "deep.go"), false},
		{cwd, filepath.Join(cwd, "..", "proj", "a.go"), false},
		{cwd, filepath.Join(cwd, "..", "other", "a.go"), true},
		{cwd, cwd + "2/a.go", true}, // a sibling sharing the prefix
		{cwd, "/etc/passwd", true},
		{cwd, filepath.Join(cwd, "escape", "a.go"), true},
		{cwd, filepath.Join(root, "inward", "a.go"), false},
		{filepath.Join(root, "projlink"), filepath.Join(cwd, "a.go"), false},
		{cwd, filepath.Join(root, "projlink", "a.go"), false},
		{"/", "/etc/passwd", false},
		{"", filepath.Join(cwd, "a.go"), true},
		{"relative", filepath.Join(cwd, "a.go"), true},
	}
	for _, tt := range tests {
		if got := Outside(tt.cwd, tt.path); got != tt.want {
			t.Errorf("Outside(%q, %q) = %v, want %v", tt.cwd, tt.path, got, tt.want)
		}
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
