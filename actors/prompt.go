package actors

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/tools"
)

// A prompt becomes the user message in two steps. promptText, pure, runs in
// the session actor when the prompt arrives: text blocks concatenated, a
// resource_link as an attached-file line, other blocks ignored. attach, which
// looks paths up on disk, runs inside the turn, on a work goroutine (never in
// the actor, never on the edge's reader): every @path that names an
// existing file or directory adds an attachment line, once per path.

// promptText concatenates a prompt's content blocks.
func promptText(blocks []acp.ContentBlock) string {
	var b strings.Builder
	for _, c := range blocks {
		switch {
		case c.Text != nil:
			b.WriteString(c.Text.Text)
		case c.ResourceLink != nil:
			b.WriteString("\n[attached file: ")
			b.WriteString(uriPath(c.ResourceLink.Uri))
			b.WriteString("]")
		}
	}
	return b.String()
}

// hasMentions says whether text may name paths to attach.
func hasMentions(text string) bool { return len(mentions(text)) > 0 }

// attach adds an attachment line for each @path of text that names an
// existing file or directory under cwd (or an absolute or ~ path); attached
// is called for each.
func attach(text, cwd string, attached func(path string)) string {
	seen := map[string]bool{}
	var extra strings.Builder
	for _, candidates := range mentions(text) {
		for _, m := range candidates {
			abs := tools.Resolve(cwd, m)
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
	return text + extra.String()
}

// mentions returns the @path tokens of text: an @ at the start or after
// white space, up to the next white space. Each comes with its candidates:
// the bare token first ("@." and "@../x" name what they say), then without
// trailing punctuation ("@main.go," names main.go).
func mentions(text string) [][]string {
	var out [][]string
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || (i > 0 && !isSpace(text[i-1])) {
			continue
		}
		j := i + 1
		for j < len(text) && !isSpace(text[j]) {
			j++
		}
		tok := text[i+1 : j]
		var c []string
		if tok != "" {
			c = append(c, tok)
		}
		if trimmed := strings.TrimRight(tok, ".,;:!?)]}'\"`"); trimmed != "" && trimmed != tok {
			c = append(c, trimmed)
		}
		if c != nil {
			out = append(out, c)
		}
		i = j
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

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
