package fetch

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// The first three of the steps bound.go describes: the HTML text is
// bounded and rewritten before the parser reads it (boundInput), the parse
// reads through the caller's context (parseBounded), and the tree it makes
// is repaired (repair).

// readChunk is the most the parser gets from one Read: between two reads it
// parses at most this much, and the context is checked.
const readChunk = 512

// renamePrefix is put before the name of every formatting element in the
// HTML text, and taken off again in the tree. The parser keeps a list of
// open formatting elements (a, b, big, code, em, font, i, nobr, s, small,
// strike, strong, tt, u) and clones all of those not closed into every new
// block: up to 500 clones per paragraph, three million nodes from 100 KB of
// <font a=1>…<font a=400> followed by short paragraphs. Renamed, they are
// unknown elements to the parser, which nests them like any other. Of the
// spec's repairs of misnested formatting, repair redoes those that change
// the Markdown (an end tag ends its element, a link ends the one before);
// formatting left open is not carried on into the next paragraph.
const renamePrefix = "mm-fmt-"

// formattingTags are the tags boundInput renames: the formatting elements,
// and <template>, so that the page cannot close parsePrefix's.
var formattingTags = []string{"a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u", "template"}

// parseDepth is how deep the page's elements may nest in the parser.
const parseDepth = 128

// parsePrefix goes before the page, so that the parser's own limit of 512
// open elements leaves the page parseDepth of them, and so that no walk
// of the parser down its stack of open elements goes further than the
// page's elements: many of its steps walk that stack (is a <p> open, in
// scope? where does this end tag close?), which makes a page of n tags
// nested d deep cost n·d, or n·d² for some. A <template> stops those walks
// (it is special, a scope boundary and a context of its own), and nothing
// in the page can close it or the elements under it, because the page's
// own template tags are renamed. The elements are taken out of the tree
// again by unpad.
var parsePrefix = "<!DOCTYPE html>" + strings.Repeat("<"+padTag+">", 512-3-parseDepth) + "<template>"

const padTag = renamePrefix + "pad"

// boundInput returns src cut before its (b.tags+1)th '<', so that the tree
// the parser builds is bounded whatever the page (a tag makes at most a
// few nodes, implied ones included), with every formatting tag renamed.
// The renaming works on bytes, not tokens: whatever the tokenizer would
// take for a tag starts with '<', the name and a space, '/', '>' or the end,
// so no formatting tag can reach the parser unrenamed, also in places a
// second tokenizer might read differently (scripts, foreign content). Text
// that merely looks like such a tag (in a script, a title, an attribute) is
// renamed too, and unrename restores it. A tag that already starts with
// renamePrefix gets it once more, so that unrename is exact.
func boundInput(src string, b htmlBounds) (string, []string) {
	var notes []string
	var sb strings.Builder
	sb.Grow(len(parsePrefix) + len(src) + len(src)/16)
	sb.WriteString(parsePrefix)
	last, tags := 0, 0
	linkOpen := false
	for i := 0; ; i++ {
		j := strings.IndexByte(src[i:], '<')
		if j < 0 {
			break
		}
		i += j
		if tags++; tags > b.tags {
			sb.WriteString(src[last:i])
			return sb.String(), append(notes, fmt.Sprintf("the page is cut after %d tags, the limit", b.tags))
		}
		k := i + 1
		end := k < len(src) && src[k] == '/'
		if end {
			k++
		}
		if !renamed(src[k:]) {
			continue
		}
		name := tagName(src[k:])
		if name == "a" {
			// An <a> closes the link before it, which the parser no longer
			// does: without this, old pages' unclosed <a name=…> anchors
			// would nest until they reach parseDepth. An end tag that
			// finds no open link is ignored by the parser.
			if !end && linkOpen {
				sb.WriteString(src[last:i])
				sb.WriteString(endMarkers["a"])
				sb.WriteString(linkCloser)
				last = i
			}
			linkOpen = !end
		}
		if end && endMarkers[name] != "" {
			sb.WriteString(src[last:i])
			sb.WriteString(endMarkers[name])
			last = i
		}
		sb.WriteString(src[last:k])
		sb.WriteString(renamePrefix)
		last = k
	}
	sb.WriteString(src[last:])
	return sb.String(), notes
}

// repair takes boundInput's renaming off the tree under n, and does some
// of what the parser would have done had the formatting elements not been
// renamed: their end tags end them (at the end marker boundInput put
// before each), also across the blocks the parser stopped at, and a link
// that starts inside another link ends that one. Either way what follows,
// inside the element that ends, moves to just after it (splitAt), where the
// walk finds it. link is the link n is in. Each node is repaired once.
func repair(n, link *html.Node) {
	for c := n.FirstChild; c != nil; {
		next := c.NextSibling
		switch c.Type {
		case html.TextNode:
			if rawText(n) {
				c.Data = unrename(c.Data)
			}
			c = next
			continue
		case html.ElementNode:
		default:
			c = next
			continue
		}
		if c.Data == endTag {
			x := ancestor(c, attr(c, "tag"))
			if x != nil && !lastIn(c, x) {
				splitAt(x, c)
				c.Parent.RemoveChild(c)
				return
			}
			n.RemoveChild(c)
			c = next
			continue
		}
		isLink := c.Data == renamePrefix+"a" && c.Namespace == ""
		if isLink && link != nil {
			splitAt(link, c)
			return
		}
		if strings.HasPrefix(c.Data, renamePrefix) {
			c.Data = c.Data[len(renamePrefix):]
			c.DataAtom = atom.Lookup([]byte(c.Data))
		}
		for i := range c.Attr {
			c.Attr[i].Val = unrename(c.Attr[i].Val)
		}
		if isLink {
			repair(c, c)
		} else {
			repair(c, link)
		}
		// A split inside c may have moved nodes after it: they come next.
		c = c.NextSibling
	}
}

// ancestor returns the nearest HTML element named name that n is in.
func ancestor(n *html.Node, name string) *html.Node {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.Type == html.ElementNode && p.Data == name && p.Namespace == "" {
			return p
		}
	}
	return nil
}

// lastIn says whether nothing follows n inside x.
func lastIn(n, x *html.Node) bool {
	for ; n != x; n = n.Parent {
		if n.NextSibling != nil {
			return false
		}
	}
	return true
}

// splitAt ends x at m, which is inside it: m and everything after it inside
// x move to just after x, inside copies of the elements between x and m,
// as the adoption agency of the HTML parser does.
func splitAt(x, m *html.Node) {
	var carry *html.Node
	first := m
	for p := m.Parent; ; p = p.Parent {
		var rest []*html.Node
		for s := first; s != nil; s = s.NextSibling {
			rest = append(rest, s)
		}
		if p == x {
			after := x
			if carry != nil {
				x.Parent.InsertBefore(carry, after.NextSibling)
				after = carry
			}
			for _, s := range rest {
				p.RemoveChild(s)
				x.Parent.InsertBefore(s, after.NextSibling)
				after = s
			}
			return
		}
		if carry != nil || len(rest) > 0 {
			clone := &html.Node{Type: p.Type, DataAtom: p.DataAtom, Data: p.Data, Namespace: p.Namespace, Attr: slices.Clone(p.Attr)}
			if carry != nil {
				clone.AppendChild(carry)
			}
			for _, s := range rest {
				p.RemoveChild(s)
				clone.AppendChild(s)
			}
			carry = clone
		}
		first = p.NextSibling
	}
}

// unpad takes parsePrefix's elements out of doc: the page's content goes
// from the <template> to the body.
func unpad(doc *html.Node) {
	body := findElement(doc, atom.Body)
	if body == nil {
		return
	}
	top := body.FirstChild
	if top == nil || top.Type != html.ElementNode || top.Data != padTag {
		return
	}
	n := top
	for n != nil && n.Type == html.ElementNode && n.Data == padTag {
		n = n.FirstChild
	}
	body.RemoveChild(top)
	if n == nil || n.DataAtom != atom.Template {
		return
	}
	for c := n.FirstChild; c != nil; c = n.FirstChild {
		n.RemoveChild(c)
		body.AppendChild(c)
	}
}

// renamed says whether the tag name s starts with gets renamePrefix.
func renamed(s string) bool {
	if len(s) >= len(renamePrefix) && strings.EqualFold(s[:len(renamePrefix)], renamePrefix) {
		return true
	}
	for _, name := range formattingTags {
		if len(s) < len(name) || !strings.EqualFold(s[:len(name)], name) {
			continue
		}
		if len(s) == len(name) {
			return true
		}
		// The tokenizer ends a tag name at these.
		switch s[len(name)] {
		case ' ', '\t', '\n', '\r', '\f', '/', '>':
			return true
		}
	}
	return false
}

// linkCloser is the end tag boundInput puts before an <a> when a link is
// open. The attribute, which the parser drops, tells it from the page's own
// (renamed) </a> where the tag lands in text or in an attribute value,
// whence unrename deletes it.
const linkCloser = "</" + renamePrefix + "a mm-close>"

// tagName returns the tag name s starts with, lowercased, as the tokenizer
// reads it.
func tagName(s string) string {
	i := strings.IndexAny(s, " \t\n\r\f/>")
	if i < 0 {
		i = len(s)
	}
	return strings.ToLower(s[:i])
}

// endTag names the marker boundInput puts before the end tag of every
// formatting element, <mm-fmt-end tag=b></mm-fmt-end>: where the parser
// ignores the end tag (</b> after a <p> that opened inside the <b>), the
// marker stays inside the element, and repair ends the element there.
const endTag = renamePrefix + "end"

var endMarkers = func() map[string]string {
	m := map[string]string{}
	for _, name := range formattingTags {
		if name != "template" {
			m[name] = "<" + endTag + " tag=" + name + "></" + endTag + ">"
		}
	}
	return m
}()

// unrenamer undoes boundInput in text: the markers and closers it put go,
// the prefixes it put before names come off.
var unrenamer = func() *strings.Replacer {
	pairs := []string{linkCloser, ""}
	for _, m := range endMarkers {
		pairs = append(pairs, m, "")
	}
	return strings.NewReplacer(append(pairs, "<"+renamePrefix, "<", "</"+renamePrefix, "</")...)
}()

// rawText says whether the text in n is read as it is written, where
// boundInput's renaming may show: text elsewhere cannot hold a tag, only
// one spelt with entities, which boundInput did not touch.
func rawText(n *html.Node) bool {
	switch n.DataAtom {
	case atom.Title, atom.Textarea, atom.Style, atom.Script, atom.Xmp, atom.Iframe, atom.Noembed, atom.Noframes, atom.Noscript, atom.Plaintext:
		return n.Namespace == ""
	}
	return false
}

// unrename undoes boundInput's renaming in raw text and attribute values.
func unrename(s string) string {
	if !strings.Contains(s, renamePrefix) {
		return s
	}
	return unrenamer.Replace(s)
}

// ctxReader hands s to the parser at most readChunk bytes at a time, and
// fails once ctx has ended, which ends the parse.
type ctxReader struct {
	ctx context.Context
	s   string
	off int
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if r.off >= len(r.s) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), readChunk)], r.s[r.off:])
	r.off += n
	return n, nil
}

// parseBounded parses in through ctx. The parser refuses a page that nests
// more than 512 elements, without saying where; since it reads in chunks
// of readChunk and fails on the token that went too deep, the page parses
// when cut two chunks before what had been read (a cut inside a tag drops
// that tag), and the model reads what comes before.
func parseBounded(ctx context.Context, in string) (*html.Node, []string, error) {
	var notes []string
	for try := 0; ; try++ {
		r := &ctxReader{ctx: ctx, s: in}
		doc, err := html.Parse(r)
		switch {
		case err == nil:
			unpad(doc)
			return doc, notes, nil
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case try == 0 && strings.Contains(err.Error(), "open stack of elements exceeds"):
			in = in[:max(len(parsePrefix), r.off-2*readChunk)]
			notes = append(notes, fmt.Sprintf("the page is cut where its elements nest deeper than %d", parseDepth))
			continue
		}
		return nil, nil, err
	}
}
