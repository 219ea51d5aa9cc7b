package history

import (
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"
)

func TestFlatten(t *testing.T) {
	path := func(uri string) string { return strings.TrimPrefix(uri, "file://") }
	blob := func(mime string) acp.ContentBlock {
		return acp.ContentBlock{Resource: &acp.ContentBlockResource{Resource: acp.EmbeddedResourceResource{
			BlobResourceContents: &acp.BlobResourceContents{Uri: "file:///w/x.bin", MimeType: acp.Ptr(mime), Blob: "AAAA"}}}}
	}
	text := func(uri, body string) acp.ContentBlock {
		return acp.ContentBlock{Resource: &acp.ContentBlockResource{Resource: acp.EmbeddedResourceResource{
			TextResourceContents: &acp.TextResourceContents{Uri: uri, Text: body}}}}
	}
	for _, c := range []struct {
		name        string
		blocks      []acp.ContentBlock
		vision      bool
		text, extra string
		images      int
	}{
		{name: "text blocks join", blocks: []acp.ContentBlock{acp.TextBlock("fix "), acp.TextBlock("@main.go")}, text: "fix @main.go"},
		{name: "a link is a line of the text", blocks: []acp.ContentBlock{acp.TextBlock("see"), acp.ResourceLinkBlock("a", "file:///w/a.go")},
			text: "see\n[attached file: /w/a.go]"},
		{name: "an embedded file is inlined", blocks: []acp.ContentBlock{text("file:///w/n.txt", "hello")},
			extra: "\n[file: /w/n.txt]\nhello\n[end of file: /w/n.txt]"},
		{name: "cut at the limit, at a character", blocks: []acp.ContentBlock{text("file:///w/n.txt", "ééé")},
			extra: "\n[file: /w/n.txt]\né\n[cut: only the first 2 bytes of 6 bytes are shown (prompt.maxResourceBytes); read_file can read the rest]\n[end of file: /w/n.txt]"},
		{name: "binary data is described", blocks: []acp.ContentBlock{blob("application/zip")},
			extra: "\n[attached file: /w/x.bin (application/zip, 3 bytes): binary, not shown]"},
		{name: "an image for a vision model", blocks: []acp.ContentBlock{acp.ImageBlock("AAAA", "image/png")}, vision: true, images: 1},
		{name: "an image left out otherwise", blocks: []acp.ContentBlock{acp.ImageBlock("AAAA", "image/png")},
			extra: "\n[an image (image/png) was attached, but this model does not take images (model.vision is false): it was left out]"},
		{name: "an image resource is an image", blocks: []acp.ContentBlock{blob("image/png")}, vision: true, images: 1},
	} {
		limit := 1 << 20
		if strings.HasPrefix(c.name, "cut") {
			limit = 3
		}
		text, extra, images := Flatten(c.blocks, limit, c.vision, path)
		if text != c.text || extra != c.extra || len(images) != c.images {
			t.Errorf("%s: %q, %q, %d image(s); want %q, %q, %d", c.name, text, extra, len(images), c.text, c.extra, c.images)
		}
	}
}

func TestTooMuchText(t *testing.T) {
	big := acp.TextBlock(strings.Repeat("x", 2000))
	if why := TooMuchText([]acp.ContentBlock{big}, 1<<20, 4000); why != "" {
		t.Errorf("a prompt under the bound refused: %s", why)
	}
	why := TooMuchText([]acp.ContentBlock{big, big, big}, 1<<20, 4000)
	if !strings.Contains(why, "about 5.9 KiB of text") || !strings.Contains(why, "at most 3.9 KiB (prompt.maxTextBytes)") {
		t.Errorf("refusal: %q", why)
	}
	if why := TooMuchText([]acp.ContentBlock{acp.ImageBlock(strings.Repeat("A", 1<<20), "image/png")}, 1<<20, 4000); why != "" {
		t.Errorf("image data counted as text: %s", why)
	}
}

func TestMentions(t *testing.T) {
	// Distinct tokens, each once; an @ inside a word or alone names
	// nothing; trailing punctuation gives a second candidate.
	got, left := Mentions("see @a.go, @dir/ and @a.go and @dir/ again; mail x@y.z @")
	if len(got) != 3 || left != 0 {
		t.Fatalf("Mentions = %v, %d left", got, left)
	}
	if len(got[0]) != 2 || got[0][0] != "a.go," || got[0][1] != "a.go" || len(got[1]) != 1 || got[1][0] != "dir/" || len(got[2]) != 1 || got[2][0] != "a.go" {
		t.Errorf("candidates %v", got)
	}
	if !HasMentions("x @y") || HasMentions("a@b @ c") {
		t.Error("HasMentions")
	}
	var many strings.Builder
	for i := range MaxMentions + 3 {
		many.WriteString(" @f")
		many.WriteString(strings.Repeat("x", i%7+1))
		many.WriteString(string(rune('a' + i%26)))
		many.WriteString(strings.Repeat("y", i/26))
	}
	if got, left := Mentions(many.String()); len(got) != MaxMentions || left != 3 {
		t.Errorf("%d mentions, %d left; want %d and 3", len(got), left, MaxMentions)
	}
}
