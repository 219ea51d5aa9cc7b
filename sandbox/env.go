package sandbox

import (
	"os"
	"slices"
	"strings"
)

// DefaultEnv is what a confined command gets of mm's own environment when
// the config names nothing else (sandbox.env): what programs need to run
// and to speak the user's language, nothing that could hold a secret.
var DefaultEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// environ is the environment of a confined command: of env (the one its
// caller made, nil for mm's own), the variables that allow names
// (sandbox.env: a name, or a prefix ending in *), and those the caller
// added or changed, which are not mm's (the session's mark, an MCP
// server's or an asked agent's own variables); then allow's NAME=value
// entries. mm's own variables go no further unless named: its tokens, its
// store's password, its model key. Run as u, the command's HOME is home
// and its USER and LOGNAME u's name.
func environ(env []string, allow []string, u *Ident, home string) []string {
	if env == nil {
		env = os.Environ()
	}
	own := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			own[k] = v
		}
	}
	var names, set []string
	for _, a := range allow {
		if strings.Contains(a, "=") {
			set = append(set, a)
		} else {
			names = append(names, a)
		}
	}
	allowed := func(k string) bool {
		return slices.ContainsFunc(names, func(n string) bool {
			if p, ok := strings.CutSuffix(n, "*"); ok {
				return strings.HasPrefix(k, p)
			}
			return n == k
		})
	}
	out := make([]string, 0, len(env)+len(set)+3)
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if mine, isMine := own[k]; allowed(k) || !isMine || mine != v {
			out = append(out, kv)
		}
	}
	out = append(out, set...)
	if u != nil {
		out = setenv(out, "HOME", home)
		if u.Name != "" {
			out = setenv(out, "USER", u.Name)
			out = setenv(out, "LOGNAME", u.Name)
		} else {
			out = unsetenv(out, "USER")
			out = unsetenv(out, "LOGNAME")
		}
	}
	return out
}

// setenv sets k in env, replacing every earlier value.
func setenv(env []string, k, v string) []string {
	return append(unsetenv(env, k), k+"="+v)
}

func unsetenv(env []string, k string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
}
