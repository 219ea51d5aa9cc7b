package history

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/coder/acp-go-sdk"
)

// A prompt becomes the user message in two steps. Flatten, pure, runs in
// the session actor when the prompt arrives: text blocks concatenated, a
// resource_link as an attached-file line, an embedded resource inlined, an
// image kept for a model that takes images. The session then looks each
// @path of the text up on disk, off the actor (Mentions names them), and
// adds an attachment line for each that exists.
//
// Both are bounded, because a prompt comes from outside: a prompt whose
// text is over prompt.maxTextBytes is refused before anything is copied or
// looked up (TooMuchText), and at most MaxMentions distinct @paths are
// looked up, the user told how many more were left.

// TooMuchText says why a prompt is refused, "" when it may be taken:
// its text, as Flatten would make it, is over max bytes. The text
// is what the user typed (text blocks, resource_link lines) and what its
// embedded resources inline, each cut at limit: a hundred pasted files
// cut at 512 KiB are as large as one typed 50 MiB. The lines that name
// files and notes count at about their size. Image data does not count:
// it is not text, and a model without vision never gets it.
func TooMuchText(blocks []acp.ContentBlock, limit, most int) string {
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
		ApproxSize(n), ApproxSize(most))
}

// Flatten is a prompt's text, what its other blocks add, and its
// images, as the user message holds them. text is what the user typed (text blocks, resource_link lines):
// slash commands, skills and @mentions are read there only, never in a
// pasted file. extra follows it in the user message: an embedded
// resource's text inlined between a header and a footer naming it, cut
// after limit bytes with a note; binary data described, not inlined.
// Images (and image resources) go to a vision model; otherwise a note in
// extra tells the model one was left out. uriPath turns a file's URI into
// the path the user message names it by.
func Flatten(blocks []acp.ContentBlock, limit int, vision bool, uriPath func(uri string) string) (text, extra string, images []Image) {
	var b, x strings.Builder
	image := func(mime, data, name string) {
		if vision {
			images = append(images, Image{MIMEType: mime, Data: data})
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
			fmt.Fprintf(&x, "\n[attached file: %s (%s, %s): binary, not shown]", uriPath(r.Uri), mime, ApproxSize(base64.StdEncoding.DecodedLen(len(r.Blob))))
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
		fmt.Fprintf(b, "\n[cut: only the first %s of %s are shown (prompt.maxResourceBytes)", ApproxSize(cut), ApproxSize(len(text)))
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

// ApproxSize writes a byte count for people: 900 bytes, 12.5 KiB, 1.2 MiB.
func ApproxSize(n int) string {
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

// MaxMentions is how many distinct @paths one prompt has looked up: each
// costs a stat or two, on a file system that may be slow (a network
// mount), and no one names more files than this on purpose.
const MaxMentions = 256

// HasMentions says whether text may name paths to attach.
func HasMentions(text string) bool {
	found := false
	eachMention(text, func(string) bool { found = true; return false })
	return found
}

// MentionsLeft says that left @mentions were not looked up.
func MentionsLeft(left int) string {
	return fmt.Sprintf("only the first %d @mentions were looked up: %d more were not attached", MaxMentions, left)
}

// Mentions returns the distinct @path tokens of text, at most MaxMentions,
// and how many more @paths (repeats of those left out included) it left.
// Each comes with its candidates: the bare token first ("@." and "@../x"
// name what they say), then without trailing punctuation ("@main.go,"
// names main.go). It is one pass over text, and holds at most MaxMentions
// tokens however many text repeats.
func Mentions(text string) (out [][]string, left int) {
	seen := map[string]bool{}
	eachMention(text, func(tok string) bool {
		switch {
		case seen[tok]:
		case len(seen) == MaxMentions:
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
