package fetch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/JohannesKaufmann/dom"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// A page is written by whoever serves it, and the HTML parser and the
// Markdown converter both have inputs whose cost grows much faster than
// their size: 1 MB of lists nested 250 deep took 245 s of CPU and 1.1 GB
// to convert, because every level copies and indents all that is inside
// it; 100 KB of unclosed <font> tags with distinct attributes make the
// parser clone them into every paragraph (3 million nodes); end tags that
// close nothing make it look through all the elements open, each time; one
// <td colspan=1000000000> has the table plugin fill a billion cells. So
// what the library is given is bounded first, in four steps, each of which
// leaves a note for the model when it cut or simplified something:
//
//   - the HTML text (boundInput, in parse.go): cut before its (tags+1)th
//     '<', the formatting elements renamed so that the parser never clones
//     them, and parsePrefix put before it, so that the parser nests the
//     page at most parseDepth deep and never looks further down than the
//     page;
//   - the parse (parseBounded): it reads through the caller's context, and
//     a page nested deeper than parseDepth is cut there rather than
//     refused;
//   - the tree, first (repair): the renaming taken off, and the repairs
//     the parser no longer makes to misnested formatting made where they
//     matter to Markdown;
//   - the tree, then (boundTree, the converter's first pre-render pass):
//     at most nodes nodes, nesting deeper than depth, or than maxLevels
//     lists and quotes, flattened to plain text, table work bounded, the
//     Markdown estimated as it goes and the tree cut where the estimate
//     passes the limit.
//
// Real pages stay well below the defaults, and convert as they did: the
// Rust book on one page is 64 000 nodes 14 levels deep, a 3 MB
// syntax-highlighted source file 173 000 nodes.

// htmlBounds bound one conversion; a zero field means its default.
type htmlBounds struct {
	tags      int // '<' bytes handed to the parser
	nodes     int // tree nodes converted (elements and text)
	depth     int // elements nested; the content of deeper ones is kept as plain text
	tableWork int // cells the table plugin may build, spans included; past it a table is plain rows
	markdown  int // bytes of Markdown
}

const (
	defaultMaxTags      = 200_000
	defaultMaxNodes     = 200_000
	defaultMaxDepth     = 64
	defaultMaxTableWork = 200_000

	// maxSpan clamps colspan and rowspan, as HTML clamps colspan.
	maxSpan = 1000
	// indentWidth is what one level of list or quote adds to every line
	// of its content, at most ("10. ", "> ").
	indentWidth = 4
	// maxLevels is how many lists and quotes may nest, each a level of
	// indentation; the content of deeper ones is kept as plain text.
	maxLevels = 8
)

func (b htmlBounds) withDefaults() htmlBounds {
	if b.tags <= 0 {
		b.tags = defaultMaxTags
	}
	if b.nodes <= 0 {
		b.nodes = defaultMaxNodes
	}
	if b.depth <= 0 {
		b.depth = defaultMaxDepth
	}
	if b.tableWork <= 0 {
		b.tableWork = defaultMaxTableWork
	}
	if b.markdown <= 0 {
		b.markdown = defaultMaxBytes
	}
	return b
}

// boundStateKey carries a conversion's *boundState in its context to
// boundTree.
type boundStateKey struct{}

// boundState is one conversion's bounds, and the notes boundTree leaves.
type boundState struct {
	bounds htmlBounds
	notes  []string
}

// boundTree is the converter's first pre-render pass. It does, within the
// bounds, the work the library's own first pass does: it removes the
// elements registered as TagTypeRemove and merges the text nodes they
// separated (the library merges them pairwise, which is quadratic in a run
// of text nodes). When the conversion's context has ended it empties the
// tree, so that the library's later passes have nothing to do.
func boundTree(ctx converter.Context, doc *html.Node) {
	st, ok := ctx.Value(boundStateKey{}).(*boundState)
	if !ok {
		return
	}
	w := &bounder{ctx: ctx, b: st.bounds}
	w.walk(doc, 0, 0)
	if ctx.Err() != nil {
		for c := doc.FirstChild; c != nil; c = doc.FirstChild {
			doc.RemoveChild(c)
		}
	}
	st.notes = w.notes()
}

// bounder walks one tree in document order, keeping count.
type bounder struct {
	ctx converter.Context
	b   htmlBounds

	nodes     int
	markdown  int // the Markdown the tree kept so far would make, estimated
	tableWork int
	tables    []*tableCount // the tables the walk is in, innermost last

	stop            bool // a bound was reached: the rest of the tree goes
	cutNodes        bool
	cutMarkdown     bool
	flattenedDeep   bool
	flattenedLevels bool
	plainTables     int
}

// tableCount is what the table plugin will build for one table: a grid of
// rows × width cells, into which it inserts one cell at a time for every
// cell a span covers.
type tableCount struct {
	rows, width, row int // row is the width of the current row
	spanRows         int // the last row a rowspan reaches
	spanWidth        int // widths of the cells that span rows, which push later rows wider
	spanCells        int // cells covered by spans, each an insertion into a row
}

func (w *bounder) walk(parent *html.Node, depth, levels int) {
	w.tidy(parent)
	if depth >= w.b.depth && hasElementChild(parent) {
		w.flatten(parent)
		w.flattenedDeep = true
	}
	indent := levels * indentWidth
	for c := parent.FirstChild; c != nil; c = c.NextSibling {
		if w.nodes++; w.nodes > w.b.nodes {
			w.stop, w.cutNodes = true, true
		} else if w.nodes%1024 == 0 && w.ctx.Err() != nil {
			w.stop = true
		}
		if w.stop {
			cutFrom(c)
			return
		}
		switch c.Type {
		case html.TextNode:
			w.text(c, indent)
		case html.ElementNode:
			w.markdown += 2 + indent + len(attr(c, "href")) + len(attr(c, "src"))
			w.element(c, depth+1, levels)
		}
		if !w.stop && w.markdown > 2*w.b.markdown {
			// The estimate counts the page's whitespace and every element
			// as a line, so it runs high: it only has to bound the work,
			// the Markdown itself is cut at the limit afterwards.
			w.stop, w.cutMarkdown = true, true
		}
	}
}

// text counts the text node n, whose every line the Markdown indents by
// indent bytes, and cuts it where the estimate passes its budget: one
// text node can hold the whole page, a <pre> of a million lines for one.
func (w *bounder) text(n *html.Node, indent int) {
	budget := 2*w.b.markdown - w.markdown
	cost := len(n.Data) + strings.Count(n.Data, "\n")*indent
	if cost <= budget {
		w.markdown += cost
		return
	}
	i := 0
	for ; i < len(n.Data) && budget > 0; i++ {
		budget--
		if n.Data[i] == '\n' {
			budget -= indent
		}
	}
	n.Data = strings.ToValidUTF8(string(trimPartialRune([]byte(n.Data[:i]))), "")
	w.markdown = 2*w.b.markdown + 1
}

// element walks the element n, at depth, inside levels of lists and
// quotes.
func (w *bounder) element(n *html.Node, depth, levels int) {
	switch n.DataAtom {
	case atom.Li, atom.Blockquote:
		// The converter renders every level of list or quote by copying
		// and indenting all that is inside it, which makes its work the
		// Markdown times the levels: beyond maxLevels the content is text.
		if levels++; levels > maxLevels && hasElementChild(n) {
			w.flatten(n)
			w.flattenedLevels = true
		}
	case atom.Table:
		w.tables = append(w.tables, &tableCount{})
		w.walk(n, depth, levels)
		t := w.tables[len(w.tables)-1]
		w.tables = w.tables[:len(w.tables)-1]
		w.table(n, t)
		return
	}
	if len(w.tables) > 0 {
		t := w.tables[len(w.tables)-1]
		switch n.DataAtom {
		case atom.Tr:
			t.width = max(t.width, t.row)
			t.rows, t.row = t.rows+1, 0
		case atom.Td, atom.Th:
			cols, rows := span(n, "colspan"), span(n, "rowspan")
			t.row += cols
			t.spanCells += cols*rows - 1
			if rows > 1 {
				t.spanWidth += cols
				t.spanRows = max(t.spanRows, t.rows+rows)
			}
		}
	}
	w.walk(n, depth, levels)
}

// table decides whether the table n, counted in t, is built as a Markdown
// table: the plugin fills every row up to the widest and inserts a cell
// into a row for every cell a span covers, so its work is the grid plus an
// insertion (the length of a row) per spanned cell. A table over what is
// left of the budget is marked role="presentation", which the plugin
// renders as plain rows.
func (w *bounder) table(n *html.Node, t *tableCount) {
	width := max(t.width, t.row) + t.spanWidth
	work := (max(t.rows, t.spanRows)+1)*width + t.spanCells*width
	if w.tableWork+work <= w.b.tableWork {
		w.tableWork += work
		return
	}
	w.plainTables++
	for i := range n.Attr {
		if n.Attr[i].Key == "role" {
			n.Attr = append(n.Attr[:i], n.Attr[i+1:]...)
			break
		}
	}
	n.Attr = append(n.Attr, html.Attribute{Key: "role", Val: "presentation"})
}

// span reads a colspan or rowspan as the table plugin does (a number of at
// least 1, or 1), clamps it to maxSpan, and writes the clamped value back
// for the plugin.
func span(n *html.Node, key string) int {
	for i, a := range n.Attr {
		if a.Key != key {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSpace(a.Val))
		if err != nil || v < 1 {
			return 1
		}
		if v > maxSpan {
			v = maxSpan
			n.Attr[i].Val = strconv.Itoa(v)
		}
		return v
	}
	return 1
}

// tidy prepares the children of n: it removes those the converter removes
// anyway (comments, scripts, navigation…) and merges the runs of text nodes
// that are left, each in one pass.
func (w *bounder) tidy(n *html.Node) {
	for c := n.FirstChild; c != nil; {
		next := c.NextSibling
		if w.removed(c) {
			n.RemoveChild(c)
		}
		c = next
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.TextNode || c.NextSibling == nil || c.NextSibling.Type != html.TextNode {
			continue
		}
		var sb strings.Builder
		sb.WriteString(c.Data)
		for next := c.NextSibling; next != nil && next.Type == html.TextNode; next = c.NextSibling {
			sb.WriteString(next.Data)
			n.RemoveChild(next)
		}
		c.Data = sb.String()
	}
}

// removed says whether the converter removes n before rendering. Some
// elements never are content but the library removes them only as part of
// <head>, where parsePrefix keeps the parser from putting them: <title>
// (htmlToMarkdown makes it the heading), <noframes>, and <template>, whose
// content is inert until a script uses it.
func (w *bounder) removed(n *html.Node) bool {
	if n.Type != html.ElementNode && n.Type != html.CommentNode {
		return false
	}
	switch n.DataAtom {
	case atom.Title, atom.Noframes, atom.Template:
		if n.Namespace == "" {
			return true
		}
	}
	t, _ := w.ctx.GetTagType(dom.NodeName(n))
	return t == converter.TagTypeRemove
}

// flatten replaces the content of n, which is as deep as the tree may go,
// by its text: what the elements inside said stays, their structure goes.
// Block elements end with a newline, which is a space outside <pre>.
func (w *bounder) flatten(n *html.Node) {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(p *html.Node) {
		for c := p.FirstChild; c != nil; c = c.NextSibling {
			switch {
			case c.Type == html.TextNode:
				sb.WriteString(c.Data)
			case c.Type != html.ElementNode:
			case w.removed(c):
			default:
				walk(c)
				if name := c.Data; name == "br" || !dom.NameIsInlineNode(name) {
					sb.WriteByte('\n')
				}
			}
		}
	}
	walk(n)
	for c := n.FirstChild; c != nil; c = n.FirstChild {
		n.RemoveChild(c)
	}
	n.AppendChild(&html.Node{Type: html.TextNode, Data: sb.String()})
}

func hasElementChild(n *html.Node) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			return true
		}
	}
	return false
}

// cutFrom removes n and its following siblings; the walk, returning, does
// the same at every level above, which leaves the tree up to n.
func cutFrom(n *html.Node) {
	p := n.Parent
	for n != nil {
		next := n.NextSibling
		p.RemoveChild(n)
		n = next
	}
}

// notes says, for the model, what the walk changed.
func (w *bounder) notes() []string {
	var out []string
	if w.flattenedDeep {
		out = append(out, fmt.Sprintf("nesting deeper than %d elements is flattened to plain text", w.b.depth))
	}
	if w.flattenedLevels {
		out = append(out, fmt.Sprintf("lists and quotes nested deeper than %d are flattened to plain text", maxLevels))
	}
	if w.plainTables > 0 {
		out = append(out, fmt.Sprintf("%d tables past the limit of %d cells are plain rows", w.plainTables, w.b.tableWork))
	}
	if w.cutNodes {
		out = append(out, fmt.Sprintf("the page is cut after %d HTML nodes, the limit", w.b.nodes))
	}
	if w.cutMarkdown {
		out = append(out, fmt.Sprintf("the page is cut where its Markdown passes the %d-byte limit", w.b.markdown))
	}
	return out
}
