package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"golang.org/x/net/html"

	"github.com/mm-agent/mm/internal/testwait"
)

// pageLimit is the default body limit, the size of the largest page a
// fetch converts.
const pageLimit = defaultMaxBytes

// fill is head, then unit as many times as fits in n bytes, then tail.
func fill(head, unit, tail string, n int) string {
	return head + strings.Repeat(unit, (n-len(head)-len(tail))/len(unit)) + tail
}

// nestedLists is the page of issue 18: 250 nested lists (500 elements, under
// the parser's own limit of 512), then items in the innermost one until the
// page is n bytes long. Converted as it is, each of the 250 levels copies
// and indents everything inside it: 1 MB took 245 s of CPU, 1.1 GB and
// made 100 MB of Markdown.
func nestedLists(n int) string {
	return fill(strings.Repeat("<ul><li>", 250), "<li>a", "", n)
}

// hostilePages are pages written to make the parser or the converter work
// for much longer than their size says, each with what the conversion must
// tell the model and keep of it.
func hostilePages() []struct{ name, page, note, keep string } {
	var fonts strings.Builder
	for i := range 100 {
		fmt.Fprintf(&fonts, "<font id=f%d>", i)
	}
	return []struct{ name, page, note, keep string }{
		{"issue 18, 1 MB", nestedLists(1 << 20), "elements nest deeper than 128", ""},
		{"issue 18, 5 MiB", nestedLists(pageLimit), "cut after 200000 tags", ""},
		// 100 unclosed formatting elements, each different, which the
		// spec's parser clones into every paragraph (with 400 of them,
		// 100 KB made 3 million nodes).
		{"formatting clones", fill("<div>"+fonts.String()+"</div>", "<p>x", "", pageLimit), "cut after 200000 tags", "x\n\nx\n\nx"},
		// Lists as deep as the parse allows, every item indented 60 levels.
		{"lists 30 deep", fill(strings.Repeat("<ul><li>", 30), "<li>item", "", pageLimit), "lists and quotes nested deeper than 8", "item item"},
		// End tags that close nothing, each of which makes the parser look
		// through all the elements open.
		{"stray end tags 120 deep", fill(strings.Repeat("<span>", 120), "</p>", "", pageLimit), "cut after 200000 tags", ""},
		// One cell, a billion columns by a billion rows: the table plugin
		// would insert every one of them.
		{"huge spans", `<table><tr><td colspan=1000000000 rowspan=1000000000>spanned</td></tr></table>`, "1 tables past the limit", "spanned"},
		// A row of 60 000 cells over 60 000 rows of one: the plugin fills
		// every row up to the widest.
		{"wide and tall table", "<table><tr>" + strings.Repeat("<td>w", 60000) + strings.Repeat("<tr><td>tall", 60000) + "</table>", "1 tables past the limit", "tall"},
		// Text nodes that removed elements separate, which the library
		// merges pairwise, copying the text so far each time.
		{"text between scripts", fill("", "word <script></script>", "", pageLimit), "cut after 200000 tags", "word word word"},
		// Every line of a <pre> 30 lists deep is indented 60 columns.
		{"lines 8 lists deep", fill(strings.Repeat("<ul><li>", 8)+"<pre>", "x\n", "</pre>", pageLimit), "Markdown passes", "x\n"},
		{"deeper than the parse", "<p>kept</p>" + strings.Repeat("<div>", 600) + "lost", "elements nest deeper than 128", "kept"},
		{"deeper than the tree", "<p>before</p>" + strings.Repeat("<div>", 100) + "deep <b>text</b>" + strings.Repeat("</div>", 100) + "<p>after</p>", "flattened to plain text", "before\n\ndeep text\n\nafter"},
	}
}

// cost measures f: wall time, the process's CPU time and the highest
// growth of the live heap, sampled every 2 ms.
func cost(f func()) (wall, cpu time.Duration, heap uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		p := base
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			p = max(p, sample[0].Value.Uint64())
			select {
			case <-stop:
				peak <- p - base
				return
			case <-tick.C:
			}
		}
	}()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	f()
	wall = time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	close(stop)
	cpu = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	return wall, cpu, <-peak
}

// TestHostileHTMLIsBounded: every hostile page converts within a hang
// bound, with a note saying what was cut or simplified, and keeps what it
// can. The figures are logged, not asserted: the machine is shared.
func TestHostileHTMLIsBounded(t *testing.T) {
	testwait.Short(t, "converting the hostile pages, seconds of CPU (TestBoundsMeasured keeps each bound covered)")
	for _, tc := range hostilePages() {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testwait.Context(t)
			var c converted
			var err error
			wall, cpu, heap := cost(func() { c, err = toMarkdown(ctx, tc.page, "https://x.test/", htmlBounds{}) })
			if err != nil {
				t.Fatalf("%d bytes: %v after %v (the hang bound is %v)", len(tc.page), err, wall, testwait.Hang)
			}
			t.Logf("%d bytes: %v, %v CPU, heap +%d MiB, %d bytes of Markdown, notes %q",
				len(tc.page), wall.Round(time.Millisecond), cpu.Round(time.Millisecond), heap>>20, len(c.md), c.notes)
			if len(c.md) > pageLimit {
				t.Errorf("%d bytes of Markdown, over the %d-byte limit", len(c.md), pageLimit)
			}
			if !strings.Contains(strings.Join(c.notes, "; "), tc.note) {
				t.Errorf("notes %q lack %q", c.notes, tc.note)
			}
			if !strings.Contains(c.md, tc.keep) {
				t.Errorf("the Markdown lacks %q: %.300q", tc.keep, c.md)
			}
		})
	}
}

// TestBoundsMeasured: each bound cuts or simplifies where it says, with
// small bounds and small pages.
func TestBoundsMeasured(t *testing.T) {
	b := htmlBounds{tags: 100, nodes: 60, depth: 14, tableWork: 10, markdown: 1000}
	for _, tc := range []struct{ name, page, note, keep, lose string }{
		{"tags", strings.Repeat("<p>t", 150), "cut after 100 tags", "t", ""},
		{"nodes", strings.Repeat("<p>n", 80), "cut after 60 HTML nodes", "n", ""},
		{"depth", strings.Repeat("<div>", 20) + "<p>deep</p><p>text</p>", "deeper than 14 elements", "deep text", ""},
		{"table", "<table><tr><td>a<td>b<td>c<tr><td>d<td>e<td>f<tr><td>g<td>h<td>i</table>", "1 tables past the limit of 10 cells", "a", "|"},
		{"small table", "<table><tr><td>a<td>b<tr><td>c<td>d</table>", "", "| a | b |", ""},
		{"markdown", "<p>" + strings.Repeat("word ", 500) + "</p><p>more</p>", "Markdown passes the 1000-byte limit", "word", "more"},
		{"levels", strings.Repeat("<blockquote>", 10) + "<p>quoted</p><p>text</p>", "nested deeper than 8 are flattened", "> > > > > > > > quoted text", ">>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := htmlToMarkdown(context.Background(), tc.page, "https://x.test/", b)
			if err != nil {
				t.Fatal(err)
			}
			notes := strings.Join(c.notes, "; ")
			if tc.note == "" && notes != "" || !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q, want %q", c.notes, tc.note)
			}
			if !strings.Contains(c.md, tc.keep) || tc.lose != "" && strings.Contains(c.md, tc.lose) {
				t.Errorf("Markdown %q: want %q, not %q", c.md, tc.keep, tc.lose)
			}
			if len(c.md) > b.markdown {
				t.Errorf("%d bytes of Markdown, over %d", len(c.md), b.markdown)
			}
		})
	}
}

// TestFormattingRestored: the formatting elements the parser gets renamed
// come back as themselves, their names in text and attributes too, and
// the repairs the parser would have made still happen: an end tag ends
// its element across a block, a link ends the link before it.
func TestFormattingRestored(t *testing.T) {
	for _, tc := range []struct{ page, want string }{
		{`<p><b>bold</b>, <i>it</i>, <code>c</code>, <s>gone</s>, <a href="/x" title="t">link</a></p>`, "**bold**, *it*, `c`, ~~gone~~, [link](https://x.test/x \"t\")"},
		{`<pre><code class="language-go">x := 1</code></pre>`, "```go\nx := 1\n```"},
		{`<title>The <b> tag</title><p><img alt="<b class=x>" src="i.png"></p>`, "# The <b> tag\n\n![<b class=x>](https://x.test/i.png)"},
		{`<p>&lt;mm-fmt-b&gt; <mm-fmt-b>custom</mm-fmt-b></p>`, "&lt;mm-fmt-b&gt; custom"},
		{`<p><a href="/1">one<a href="/2">two</a> three</p>`, "[one](https://x.test/1)[two](https://x.test/2) three"},
		{`<div><a href="/1"><p>card</p></a></div>`, "[card](https://x.test/1)"},
		{`<b><p>Bold </b>not bold</p><p>plain</p>`, "**Bold**\n\nnot bold\n\nplain"},
		{strings.Repeat(`<a name=n>anchor `, 300) + "<p>end</p>", "end"},
		{`<script>var s = "<b class=x></b>";</script><template><p>inert</p></template><p>shown</p>`, "shown"},
	} {
		c, err := htmlToMarkdown(context.Background(), tc.page, "https://x.test/", htmlBounds{})
		if err != nil || !strings.Contains(c.md, tc.want) || len(c.notes) != 0 {
			t.Errorf("%.80q: %q, notes %q, %v; want %q", tc.page, c.md, c.notes, err, tc.want)
		}
		if strings.Contains(c.md, renamePrefix) && !strings.Contains(tc.page, renamePrefix) {
			t.Errorf("%.80q: the renaming shows: %q", tc.page, c.md)
		}
	}
}

// TestConversionStopsWhenCancelled: a cancel during the conversion of the
// costliest page is answered at once, and the goroutine the conversion
// leaves behind ends soon after, because it sees the same cancel.
func TestConversionStopsWhenCancelled(t *testing.T) {
	page := fill(strings.Repeat("<span>", 120), "</p>", "", pageLimit)
	for _, after := range []time.Duration{time.Millisecond, 30 * time.Millisecond, 200 * time.Millisecond, 600 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := toMarkdown(ctx, page, "https://x.test/", htmlBounds{})
			done <- err
		}()
		// The same work, run directly, ends when the goroutine that
		// toMarkdown leaves behind would.
		worker := make(chan struct{})
		go func() {
			_, _ = htmlToMarkdown(ctx, page, "https://x.test/", htmlBounds{})
			close(worker)
		}()
		time.Sleep(after)
		start := time.Now()
		cancel()
		const hang = testwait.Hang
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("after %v: %v", after, err)
			}
			t.Logf("cancelled after %v: answered in %v (%v)", after, time.Since(start), err)
		case <-time.After(hang):
			t.Fatalf("cancelled after %v: not answered within %v", after, hang)
		}
		select {
		case <-worker:
			t.Logf("cancelled after %v: the work stopped %v after the cancel", after, time.Since(start))
		case <-time.After(hang):
			t.Fatalf("cancelled after %v: the work went on for %v", after, hang)
		}
	}
}

// stallElement is an element name no page uses, whose rendering waits for
// the conversion's context to end: a conversion that only the fetch's
// limit can stop, however fast the machine converts.
const stallElement = "mm-test-stall"

// registerStall adds, once, the renderer of stallElement to the package's
// converter. Every other element goes to the next renderer, so the other
// tests convert as before.
var registerStall = sync.OnceFunc(func() {
	mdConverter().Register.Renderer(func(ctx converter.Context, _ converter.Writer, n *html.Node) converter.RenderStatus {
		if n.Type != html.ElementNode || n.Data != stallElement {
			return converter.RenderTryNext
		}
		<-ctx.Done()
		return converter.RenderSuccess
	}, converter.PriorityEarly-98)
})

// TestConversionTimesOut: a fetch whose time runs out while its page is
// converted fails with a timeout the model reads. The page arrives at
// once and its conversion never ends, so that the limit is the only way
// out and it can only come during the conversion.
func TestConversionTimesOut(t *testing.T) {
	registerStall()
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<p>kept</p><%s>never converted</%s>", stallElement, stallElement)
	})
	srv := newServer(t, mux)
	l := Limits{Timeout: time.Second}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := Get(context.Background(), newClient(t, l), srv.URL+"/slow", l)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(testwait.Hang):
		t.Fatalf("the fetch did not end within %v of its 1 s limit", testwait.Hang)
	}
	t.Logf("answered after %v: %v", time.Since(start), err)
	wantError(t, err, srv.URL+"/slow", "timed out while converting", "1s")
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("a timeout wraps context.DeadlineExceeded")
	}
}
