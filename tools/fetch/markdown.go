package fetch

import (
	"context"
	"fmt"
	neturl "net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/strikethrough"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// mdConverter is built once: the library documents its Converter as safe
// for concurrent use, and building one registers every plugin anew.
var mdConverter = sync.OnceValue(func() *converter.Converter {
	conv := converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(),
		commonmark.NewCommonmarkPlugin(),
		strikethrough.NewStrikethroughPlugin(),
		// Minimal padding, because aligned columns cost the model tokens
		// and tell it nothing; the first row becomes the header of tables
		// that have none, because a Markdown table cannot be without one.
		table.NewTablePlugin(
			table.WithCellPaddingBehavior(table.CellPaddingBehaviorMinimal),
			table.WithSkipEmptyRows(true),
			table.WithHeaderPromotion(true),
		),
	))
	// The base plugin already drops head, script, style, noscript, iframe
	// and form inputs. Navigation and footers repeat on every page of a site
	// and crowd out the content the model asked for. Inline SVG is drawing,
	// but its <title> and <text> would otherwise surface as stray words
	// ("icon", "logo") in the middle of the text.
	for _, tag := range []string{"nav", "footer", "svg"} {
		conv.Register.TagType(tag, converter.TagTypeRemove, converter.PriorityStandard)
	}
	// The tree is bounded before any of the library's own passes sees it
	// (bound.go), and a conversion whose context ends renders nothing more:
	// every element is then answered as rendered, so that the rest of the
	// tree is skipped instead of converted for no one.
	conv.Register.PreRenderer(boundTree, converter.PriorityEarly-50)
	conv.Register.Renderer(func(ctx converter.Context, _ converter.Writer, _ *html.Node) converter.RenderStatus {
		if ctx.Err() != nil {
			return converter.RenderSuccess
		}
		return converter.RenderTryNext
	}, converter.PriorityEarly-99)
	return conv
})

// converted is what htmlToMarkdown made of a page.
type converted struct {
	md    string
	notes []string // what was cut or simplified, each a phrase for the model
}

// toMarkdown converts a page within b, and returns as soon as ctx ends,
// with an error that wraps ctx.Err(). The conversion runs in a goroutine of
// its own, so that a cancel or the fetch's timeout is answered at once
// whatever the converter is doing. A goroutine left behind that way sees
// the same ctx: the parse reads no further, the pruning stops and every
// element left renders as nothing, so it ends after at most one pass of the
// library over the bounded tree (b.nodes nodes), holding no more than that
// tree and what it had converted. A panic in the converter is an error, not
// a crash of mm.
func toMarkdown(ctx context.Context, src, pageURL string, b htmlBounds) (converted, error) {
	type result struct {
		c   converted
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("the converter failed: %v", r)}
			}
		}()
		c, err := htmlToMarkdown(ctx, src, pageURL, b)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			return converted{}, ctx.Err()
		}
		return r.c, r.err
	case <-ctx.Done():
		return converted{}, ctx.Err()
	}
}

// htmlToMarkdown converts a page to Markdown whose links and images are
// absolute, so that the model can fetch them in turn. Relative references
// resolve against the page's <base href> if it has one, and otherwise
// against pageURL, the URL the page was finally served from. The page title
// becomes a first heading when the content does not start with one, because
// the title is often the only statement of what the page is.
//
// The page is bounded before it is parsed, and its tree before it is
// converted (bound.go); a Markdown longer than b.markdown is cut at a line.
func htmlToMarkdown(ctx context.Context, src, pageURL string, b htmlBounds) (converted, error) {
	b = b.withDefaults()
	in, notes := boundInput(src, b)
	doc, more, err := parseBounded(ctx, in)
	if err != nil {
		return converted{}, err
	}
	notes = append(notes, more...)
	repair(doc, nil)
	// A title is one line of a few words; a page that puts megabytes
	// there gets a heading of a useful length.
	title := cut(oneLine(unrename(textOf(findElement(doc, atom.Title)))), maxTitleRunes)
	baseURL := pageURL
	if el := findElement(doc, atom.Base); el != nil {
		if href := unrename(attr(el, "href")); href != "" {
			if pu, err := neturl.Parse(pageURL); err == nil {
				if ref, err := neturl.Parse(strings.TrimSpace(href)); err == nil {
					baseURL = pu.ResolveReference(ref).String()
				}
			}
		}
	}
	st := &boundState{bounds: b}
	md, err := mdConverter().ConvertNode(doc, converter.WithDomain(baseURL),
		converter.WithContext(context.WithValue(ctx, boundStateKey{}, st)))
	if err != nil {
		return converted{}, err
	}
	if err := ctx.Err(); err != nil {
		return converted{}, err
	}
	notes = append(notes, st.notes...)
	text := strings.TrimSpace(string(md))
	if title != "" && !atxHeadingRE.MatchString(text) {
		text = strings.TrimSpace("# " + title + "\n\n" + text)
	}
	if len(text) > b.markdown {
		text = cutAtLine(text, b.markdown)
		notes = append(notes, fmt.Sprintf("the Markdown is cut at the %d-byte limit", b.markdown))
	}
	return converted{md: text, notes: notes}, nil
}

// cutAtLine shortens s to at most n bytes, at the end of a line when one
// ends in the second half, and never inside a UTF-8 sequence.
func cutAtLine(s string, n int) string {
	s = s[:n]
	if i := strings.LastIndexByte(s, '\n'); i > n/2 {
		return strings.TrimRight(s[:i], " \t\n")
	}
	return strings.ToValidUTF8(string(trimPartialRune([]byte(s))), "")
}

// maxTitleRunes is the longest page title made a heading.
const maxTitleRunes = 500

// atxHeadingRE matches text that starts with a Markdown heading.
var atxHeadingRE = regexp.MustCompile(`^#{1,6}(?:[ \t]|$)`)

// findElement returns the first HTML element (not SVG or MathML, whose
// <title> is no page title) of the given kind in document order.
func findElement(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a && n.Namespace == "" {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if found := findElement(c, a); found != nil {
			return found
		}
	}
	return nil
}

// textOf returns the text inside n.
func textOf(n *html.Node) string {
	if n == nil {
		return ""
	}
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return sb.String()
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key && a.Namespace == "" {
			return a.Val
		}
	}
	return ""
}
