package actors

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/tools"
)

// A prompt's blocks are flattened by history.Flatten when it arrives, in
// the session actor; attach, which looks paths up on disk, runs inside the
// turn, on a work goroutine (never in the actor, never on the edge's
// reader): every @path that names an existing file or directory adds an
// attachment line, once per path, at most history.MaxMentions of them.

// attach adds an attachment line for each @path of text that names an
// existing file or directory under cwd (or an absolute or ~ path) that
// within takes (the session's roots: mm serve's tenants look at nothing
// else); attached is called for each. Only the first history.MaxMentions distinct @paths are
// looked up; when there are more, a last line tells the model how many,
// and left says it for the user.
func attach(text, cwd string, within func(string) bool, attached func(path string)) (full string, left int) {
	seen := map[string]bool{}
	var extra strings.Builder
	ms, left := history.Mentions(text)
	for _, candidates := range ms {
		for _, m := range candidates {
			abs := tools.Resolve(cwd, m)
			if !within(abs) {
				continue
			}
			fi, err := os.Stat(abs)
			if err != nil {
				continue
			}
			if !seen[abs] {
				seen[abs] = true
				if fi.IsDir() {
					extra.WriteString("\n[attached directory: " + abs + "]")
				} else {
					extra.WriteString("\n[attached file: " + abs + "]")
				}
				attached(abs)
			}
			break
		}
	}
	if left > 0 {
		extra.WriteString("\n[" + history.MentionsLeft(left) + "]")
	}
	return text + extra.String(), left
}

// uriPath turns a file:// URI into a path; other URIs stay as they are.
func uriPath(uri string) string {
	if !strings.HasPrefix(uri, "file:") {
		return uri
	}
	u, err := url.Parse(uri)
	if err != nil || u.Path == "" {
		return strings.TrimPrefix(strings.TrimPrefix(uri, "file:"), "//")
	}
	p := u.Path
	if len(p) >= 3 && p[0] == '/' && p[2] == ':' {
		p = p[1:] // file:///E:/x names the drive path E:/x
	}
	if u.Host != "" && u.Host != "localhost" {
		p = "//" + u.Host + p // a UNC path such as file://wsl.localhost/…
	}
	return filepath.Clean(tools.TranslatePath(p))
}
