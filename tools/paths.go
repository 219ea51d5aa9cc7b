package tools

import (
	"os"
	"path"
	"path/filepath"
	"strings"
)

// TranslatePath turns a Windows path, as an editor on Windows sends it to mm
// running inside WSL, into the Linux path of the same file:
//
//	\\wsl.localhost\Ubuntu\home\u\x  →  /home/u/x
//	\\wsl$\Ubuntu\home\u\x           →  /home/u/x
//	E:\Projects\x                    →  /mnt/e/Projects/x
//
// Forward-slash and mixed variants (//wsl.localhost/Ubuntu/..., E:/x) and the
// \\?\ and \\.\ device prefixes are translated too; the host names and the
// drive letter are matched without regard to case, and the result is
// cleaned (no trailing slash). Anything else, including every Linux path and
// UNC paths to other hosts, is returned unchanged.
func TranslatePath(p string) string {
	if len(p) >= 2 && isSep(p[0]) && isSep(p[1]) {
		rest := p[2:]
		// \\?\C:\x and \\.\C:\x are Win32 device paths for C:\x, and
		// \\?\UNC\host\share is the device form of \\host\share.
		if len(rest) >= 2 && (rest[0] == '?' || rest[0] == '.') && isSep(rest[1]) {
			inner := rest[2:]
			if len(inner) > 4 && strings.EqualFold(inner[:3], "UNC") && isSep(inner[3]) {
				if t, ok := translateWSL(inner[4:]); ok {
					return t
				}
				return p
			}
			if t, ok := translateDrive(inner); ok {
				return t
			}
			return p
		}
		if t, ok := translateWSL(rest); ok {
			return t
		}
		return p
	}
	if t, ok := translateDrive(p); ok {
		return t
	}
	return p
}

func isSep(c byte) bool { return c == '\\' || c == '/' }

// translateWSL translates "wsl.localhost\Distro\rest" or "wsl$\Distro\rest"
// (the part after the leading two separators) into "/rest".
func translateWSL(s string) (string, bool) {
	host, after, ok := cutSep(s)
	if !ok || !(strings.EqualFold(host, "wsl.localhost") || strings.EqualFold(host, "wsl$")) {
		return "", false
	}
	distro, rest, _ := cutSep(after)
	if distro == "" {
		return "", false
	}
	return path.Clean("/" + strings.ReplaceAll(rest, `\`, "/")), true
}

// translateDrive translates "E:\rest" or "E:/rest" (or a bare "E:") into
// "/mnt/e/rest". A drive-relative path such as "E:x" is left alone: it names
// a directory that only the Windows process knew.
func translateDrive(s string) (string, bool) {
	if len(s) < 2 || s[1] != ':' || !isLetter(s[0]) || (len(s) > 2 && !isSep(s[2])) {
		return "", false
	}
	drive := strings.ToLower(s[:1])
	rest := strings.ReplaceAll(s[2:], `\`, "/")
	return path.Clean("/mnt/" + drive + "/" + rest), true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// cutSep splits s at its first separator of either kind.
func cutSep(s string) (before, after string, found bool) {
	if i := strings.IndexAny(s, `\/`); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// Resolve turns a path from a tool argument or a prompt into an absolute,
// cleaned path: it translates Windows/WSL paths, expands a leading ~ to
// $HOME, and joins a relative path with cwd.
func Resolve(cwd, p string) string {
	p = expandHome(TranslatePath(p))
	if !filepath.IsAbs(p) {
		p = filepath.Join(TranslatePath(cwd), p)
	}
	return filepath.Clean(p)
}

// expandHome expands "~" and "~/x". "~user" is left alone: looking up other
// users' homes is more surprise than help for a path argument.
func expandHome(p string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return p
	}
	return filepath.Join(home, p[1:])
}

// Outside says whether absPath lies outside cwd. Both are cleaned and their
// symlinks resolved where they exist, so a link inside the cwd that points
// elsewhere counts as outside, and a path that does not exist yet is judged
// by its deepest existing parent. An empty cwd puts every path outside,
// because the safe answer is the one that asks.
func Outside(cwd, absPath string) bool {
	if cwd == "" || !filepath.IsAbs(cwd) {
		return true
	}
	return !within(realPath(cwd), realPath(absPath))
}

// within says whether p is dir or below it; both must be clean.
func within(dir, p string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// realPath resolves the symlinks of the longest existing prefix of p and
// appends the rest unchanged: a file about to be created is judged by where
// its parent really is.
func realPath(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(realPath(parent), filepath.Base(p))
}
