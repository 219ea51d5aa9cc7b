package tools

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// DefaultSensitive returns the default tools.sensitive patterns. Each call
// returns a new slice.
func DefaultSensitive() []string {
	return []string{".env", ".env.*", "id_rsa*", "id_ed25519*", "*.pem", "*.key", ".ssh/**", ".aws/**", ".netrc"}
}

// Sensitive matches paths against the tools.sensitive globs. Reading or
// writing a matching path always asks the user, even in yolo mode.
//
// A pattern without "/" matches the base name of a path, wherever it is
// ("*.pem" matches /srv/tls/site.pem). A pattern with "/" is matched, one
// path component per pattern component, against every tail of the path's
// components, so ".ssh/**" matches /home/u/.ssh/id_rsa even outside the cwd;
// "**" stands for any number of components, none included. A pattern that
// starts with "/" is anchored: it must match the whole path relative to the
// cwd, or the whole absolute path ("/etc/**"). A leading "~/" stands for
// $HOME. Components use path.Match syntax (*, ?, [a-z]).
//
// Matching ignores case: a false match costs one more question, while a
// missed .ENV on a case-insensitive Windows drive could leak a secret.
//
// A Sensitive is immutable once built and safe for concurrent use. A nil
// *Sensitive matches nothing.
type Sensitive struct {
	base     []string   // patterns without "/": matched against the base name
	floating [][]string // patterns with "/": matched against any tail of the path
	anchored [][]string // patterns starting with "/": matched against the whole path
}

// NewSensitive compiles the patterns. An empty or malformed pattern is an
// error naming it.
func NewSensitive(patterns []string) (*Sensitive, error) {
	s := &Sensitive{}
	for _, raw := range patterns {
		p := strings.ToLower(strings.TrimSpace(raw))
		if p == "" {
			return nil, errors.New("tools.sensitive: empty pattern")
		}
		if p == "~" || strings.HasPrefix(p, "~/") {
			p = strings.ToLower(filepath.ToSlash(expandHome(p)))
		}
		anchored := strings.HasPrefix(p, "/")
		trimmed := strings.Trim(p, "/")
		if trimmed == "" {
			return nil, fmt.Errorf("tools.sensitive: pattern %q matches nothing", raw)
		}
		parts := strings.Split(trimmed, "/")
		for _, part := range parts {
			if part == "" {
				return nil, fmt.Errorf("tools.sensitive: pattern %q has an empty component", raw)
			}
			if _, err := path.Match(part, ""); err != nil {
				return nil, fmt.Errorf("tools.sensitive: bad pattern %q: %w", raw, err)
			}
		}
		switch {
		case anchored:
			s.anchored = append(s.anchored, parts)
		case len(parts) == 1 && parts[0] != "**":
			s.base = append(s.base, parts[0])
		default:
			s.floating = append(s.floating, parts)
		}
	}
	return s, nil
}

// Match says whether absPath is sensitive for a session in cwd. The path is
// checked as given and, when it is a symlink, as the file it points to, so
// that a link named notes.txt pointing at ~/.ssh/id_rsa still asks.
func (s *Sensitive) Match(cwd, absPath string) bool {
	if s == nil {
		return false
	}
	p := filepath.Clean(absPath)
	if s.match(cwd, p) {
		return true
	}
	if r := realPath(p); r != p {
		return s.match(realPath(cwd), r)
	}
	return false
}

func (s *Sensitive) match(cwd, p string) bool {
	lower := strings.ToLower(filepath.ToSlash(p))
	comps := splitComponents(lower)
	if len(comps) == 0 {
		return false
	}
	name := comps[len(comps)-1]
	for _, pat := range s.base {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	for _, pat := range s.floating {
		for i := range comps {
			if matchComponents(pat, comps[i:]) {
				return true
			}
		}
	}
	if len(s.anchored) > 0 {
		var rel []string
		if cwd != "" && filepath.IsAbs(cwd) && within(filepath.Clean(cwd), p) {
			rel = splitComponents(strings.ToLower(filepath.ToSlash(strings.TrimPrefix(p, filepath.Clean(cwd)))))
		}
		for _, pat := range s.anchored {
			if matchComponents(pat, comps) || (rel != nil && matchComponents(pat, rel)) {
				return true
			}
		}
	}
	return false
}

func splitComponents(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// matchComponents matches a pattern against a path, component by
// component, with "**" standing for zero or more components. Patterns are a
// handful of components long, so the backtracking stays cheap.
func matchComponents(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for len(rest) > 0 && rest[0] == "**" {
				rest = rest[1:]
			}
			for i := 0; i <= len(name); i++ {
				if matchComponents(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// AlwaysAsk says whether the call must ask the user even in yolo mode, and
// why: it reads or writes a sensitive path, or it writes outside cwd, or
// (bash) its command line names a sensitive path. A mutating call writes
// every one of its Locations; any other call only reads them. What a
// command touches cannot be known before it runs, so bash is only checked
// for the paths its words name, never for writing outside cwd. The reason
// is a short sentence fit for a permission dialog.
func (c *Call) AlwaysAsk(s *Sensitive, cwd string) (bool, string) {
	if c == nil {
		return false, ""
	}
	if c.Ask != "" {
		return true, c.Ask
	}
	for _, p := range c.Named {
		if s.Match(cwd, p) {
			return true, "the command names a sensitive path: " + p
		}
	}
	for _, loc := range c.Locations {
		if s.Match(cwd, loc) {
			if c.Mutating {
				return true, "writes a sensitive path: " + loc
			}
			return true, "reads a sensitive path: " + loc
		}
		if c.Mutating && Outside(cwd, loc) {
			return true, "writes outside the working directory: " + loc
		}
	}
	return false, ""
}
