package actors

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/tools"
)

// A prompt becomes the user message in two steps. promptContent, pure, runs
// in the session actor when the prompt arrives: text blocks concatenated, a
// resource_link as an attached-file line, an embedded resource inlined, an
// image kept for a model that takes images. attach, which looks paths up on
// disk, runs inside the turn, on a work goroutine (never in the actor, never
// on the edge's reader): every @path that names an existing file or
// directory adds an attachment line, once per path.
//
// Both are bounded, because a prompt comes from outside: a prompt whose
// text is over prompt.maxTextBytes is refused before anything is copied or
// looked up (promptTooMuchText), and attach looks up at most maxMentions
// distinct @paths, saying how many more it left.

// promptTooMuchText says why a prompt is refused, "" when it may be taken:
// its text, as promptContent would make it, is over max bytes. The text
// is what the user typed (text blocks, resource_link lines) and what its
// embedded resources inline, each cut at limit: a hundred pasted files
// cut at 512 KiB are as large as one typed 50 MiB. The lines that name
// files and notes count at about their size. Image data does not count:
// it is not text, and a model without vision never gets it.
func promptTooMuchText(blocks []acp.ContentBlock, limit, most int) string {
	n := 0
	for _, c := range blocks {
		switch {
		case c.Text != nil:
			n += len(c.Text.Text)
		case c.ResourceLink != nil:
			n += len(c.ResourceLink.Uri) + len("\n[attached file: ]")
		case c.Resource != nil && c.Resource.Resource.TextResourceContents != nil:
			r := c.Resource.Resource.TextResourceContents
			n += min(len(r.Text), limit) + 2*len(r.Uri) + len("\n[file: ]\n\n[end of file: ]")
		case c.Resource != nil && c.Resource.Resource.BlobResourceContents != nil:
			r := c.Resource.Resource.BlobResourceContents
			n += len(r.Uri) + len(deref(r.MimeType)) + 64
		case c.Image != nil:
			n += len(c.Image.MimeType) + len(deref(c.Image.Uri)) + 128
		case c.Audio != nil:
			n += len(c.Audio.MimeType) + 128
		}
	}
	if n <= most {
		return ""
	}
	return fmt.Sprintf("the prompt is too large: about %s of text, and mm takes at most %s (prompt.maxTextBytes); send less, or name large files with @path so that the model reads what it needs",
		approxSize(n), approxSize(most))
}

// promptContent is a prompt's text, what its other blocks add, and its
// images. text is what the user typed (text blocks, resource_link lines):
// slash commands, skills and @mentions are read there only, never in a
// pasted file. extra follows it in the user message: an embedded
// resource's text inlined between a header and a footer naming it, cut
// after limit bytes with a note; binary data described, not inlined.
// Images (and image resources) go to a vision model; otherwise a note in
// extra tells the model one was left out.
func promptContent(blocks []acp.ContentBlock, limit int, vision bool) (text, extra string, images []history.Image) {
	var b, x strings.Builder
	image := func(mime, data, name string) {
		if vision {
			images = append(images, history.Image{MIMEType: mime, Data: data})
			return
		}
		fmt.Fprintf(&x, "\n[an image (%s%s) was attached, but this model does not take images (model.vision is false): it was left out]", mime, name)
	}
	for _, c := range blocks {
		switch {
		case c.Text != nil:
			b.WriteString(c.Text.Text)
		case c.ResourceLink != nil:
			b.WriteString("\n[attached file: ")
			b.WriteString(uriPath(c.ResourceLink.Uri))
			b.WriteString("]")
		case c.Resource != nil && c.Resource.Resource.TextResourceContents != nil:
			r := c.Resource.Resource.TextResourceContents
			inline(&x, uriPath(r.Uri), r.Text, limit)
		case c.Resource != nil && c.Resource.Resource.BlobResourceContents != nil:
			r := c.Resource.Resource.BlobResourceContents
			mime := deref(r.MimeType)
			if strings.HasPrefix(mime, "image/") {
				image(mime, r.Blob, ", "+uriPath(r.Uri))
				continue
			}
			if mime == "" {
				mime = "binary data"
			}
			fmt.Fprintf(&x, "\n[attached file: %s (%s, %s): binary, not shown]", uriPath(r.Uri), mime, approxSize(base64.StdEncoding.DecodedLen(len(r.Blob))))
		case c.Image != nil:
			name := ""
			if c.Image.Uri != nil {
				name = ", " + uriPath(*c.Image.Uri)
			}
			image(c.Image.MimeType, c.Image.Data, name)
		case c.Audio != nil:
			fmt.Fprintf(&x, "\n[an audio clip (%s) was attached, but mm does not pass audio to the model: it was left out]", c.Audio.MimeType)
		}
	}
	return b.String(), x.String(), images
}

// inline writes an embedded resource's text between lines that name it,
// cut to at most limit bytes (at a character boundary) with a note.
func inline(b *strings.Builder, name, text string, limit int) {
	fmt.Fprintf(b, "\n[file: %s]\n", name)
	if len(text) <= limit {
		b.WriteString(text)
	} else {
		cut := limit
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		b.WriteString(text[:cut])
		fmt.Fprintf(b, "\n[cut: only the first %s of %s are shown (prompt.maxResourceBytes)", approxSize(cut), approxSize(len(text)))
		if filepath.IsAbs(name) {
			b.WriteString("; read_file can read the rest")
		}
		b.WriteString("]")
	}
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "[end of file: %s]", name)
}

// approxSize writes a byte count for people: 900 bytes, 12.5 KiB, 1.2 MiB.
func approxSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// maxMentions is how many distinct @paths one prompt has looked up: each
// costs a stat or two, on a file system that may be slow (a network
// mount), and no one names more files than this on purpose.
const maxMentions = 256

// hasMentions says whether text may name paths to attach.
func hasMentions(text string) bool {
	found := false
	eachMention(text, func(string) bool { found = true; return false })
	return found
}

// attach adds an attachment line for each @path of text that names an
// existing file or directory under cwd (or an absolute or ~ path); attached
// is called for each. Only the first maxMentions distinct @paths are
// looked up; when there are more, a last line tells the model how many,
// and left says it for the user.
func attach(text, cwd string, attached func(path string)) (full string, left int) {
	seen := map[string]bool{}
	var extra strings.Builder
	ms, left := mentions(text)
	for _, candidates := range ms {
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
	if left > 0 {
		extra.WriteString("\n[" + mentionsLeft(left) + "]")
	}
	return text + extra.String(), left
}

// mentionsLeft says that left @mentions were not looked up.
func mentionsLeft(left int) string {
	return fmt.Sprintf("only the first %d @mentions were looked up: %d more were not attached", maxMentions, left)
}

// mentions returns the distinct @path tokens of text, at most maxMentions,
// and how many more @paths (repeats of those left out included) it left.
// Each comes with its candidates: the bare token first ("@." and "@../x"
// name what they say), then without trailing punctuation ("@main.go,"
// names main.go). It is one pass over text, and holds at most maxMentions
// tokens however many text repeats.
func mentions(text string) (out [][]string, left int) {
	seen := map[string]bool{}
	eachMention(text, func(tok string) bool {
		switch {
		case seen[tok]:
		case len(seen) == maxMentions:
			left++
		default:
			seen[tok] = true
			c := []string{tok}
			if trimmed := strings.TrimRight(tok, ".,;:!?)]}'\"`"); trimmed != "" && trimmed != tok {
				c = append(c, trimmed)
			}
			out = append(out, c)
		}
		return true
	})
	return out, left
}

// eachMention calls fn with each @path token of text, in order, until fn
// returns false: an @ at the start or after white space, up to the next
// white space, not empty.
func eachMention(text string, fn func(tok string) bool) {
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || (i > 0 && !isSpace(text[i-1])) {
			continue
		}
		j := i + 1
		for j < len(text) && !isSpace(text[j]) {
			j++
		}
		if j > i+1 && !fn(text[i+1:j]) {
			return
		}
		i = j
	}
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
