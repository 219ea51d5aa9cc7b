package fetch

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	neturl "net/url"
	"strings"
	"time"
)

// Limits bound one fetch.
type Limits struct {
	Timeout      time.Duration // whole request, body included; 0 means 30s
	MaxRedirects int           // 0 means 5; more is an error
	MaxBytes     int64         // body bytes read at most; 0 means 5 MiB; a longer body is cut, and Page.Truncated says so
}

// Page is what a fetch got.
type Page struct {
	URL         string // the final URL, after redirects
	Status      int
	ContentType string // the media type, lowercased, without parameters (e.g. "text/html")
	// Text is what the model reads: Markdown for HTML, the body as is for text and JSON (JSON pretty-printed when it parses).
	Text      string
	Truncated bool  // the body was longer than MaxBytes
	Bytes     int64 // body bytes read
	// Notes say what the conversion of an HTML page cut or simplified to
	// stay within its bounds, each a phrase for the model ("the page is cut
	// after 200000 HTML nodes, the limit"); none for a page converted whole.
	Notes []string
}

const (
	defaultTimeout      = 30 * time.Second
	defaultMaxRedirects = 5
	defaultMaxBytes     = 5 << 20

	userAgent = "mm (bash-first coding agent)"

	// acceptHeader asks for the formats the model reads best. A server that
	// can serve Markdown or JSON as well as HTML is free to choose; anything
	// else is accepted at a low weight, because many servers answer 406 to an
	// Accept header that excludes */*, and a refusal we explain is more useful
	// to the model than a 406.
	acceptHeader = "text/html, text/markdown, text/plain, application/json, */*;q=0.1"

	// errorBodyBytes is how much of a non-2xx body is read: enough to find
	// the start of the text of a typical HTML error page, not more, because
	// the error line only quotes its beginning.
	errorBodyBytes = 64 << 10
	// errorSnippetRunes is how much of an error body the error line quotes.
	errorSnippetRunes = 200
)

// withDefaults replaces the zero values of l by the documented defaults. A
// negative MaxRedirects means that no redirect is followed at all; negative
// Timeout and MaxBytes have no useful meaning and also get the defaults.
func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = defaultTimeout
	}
	if l.MaxRedirects == 0 {
		l.MaxRedirects = defaultMaxRedirects
	} else if l.MaxRedirects < 0 {
		l.MaxRedirects = 0
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = defaultMaxBytes
	}
	return l
}

// NewClient returns the http.Client Get is meant to be used with: the limits' timeout and redirect limit, a User-Agent "mm (bash-first coding agent)", proxies from the environment. Keep-alive connections are shared by the calls that use one client.
func NewClient(l Limits) *http.Client {
	l = l.withDefaults()
	// Cloning the default transport keeps its dial and TLS timeouts, HTTP/2
	// and ProxyFromEnvironment, without sharing its connection pool with the
	// rest of the process.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyFromEnvironment
	return &http.Client{
		Transport:     &userAgentTransport{base: tr},
		CheckRedirect: checkRedirect(l.MaxRedirects),
		Timeout:       l.Timeout,
	}
}

// userAgentTransport names mm to servers on every request the client makes,
// also when the request is not made by Get.
type userAgentTransport struct {
	base *http.Transport
}

func (t *userAgentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("User-Agent") == "" {
		// A RoundTripper must not modify the caller's request, so the
		// header goes on a clone.
		req = req.Clone(req.Context())
		req.Header.Set("User-Agent", userAgent)
	}
	return t.base.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport; without it the client's idle connections could only be
// closed by garbage collection.
func (t *userAgentTransport) CloseIdleConnections() {
	t.base.CloseIdleConnections()
}

// redirectError is what checkRedirect returns; Get turns it into a message
// for the model.
type redirectError struct {
	limit  int
	to     string // the URL the refused redirect pointed to
	loop   bool   // to was already visited in this chain
	scheme string // set when the redirect was refused for its scheme
}

func (e *redirectError) Error() string {
	if e.scheme != "" {
		return fmt.Sprintf("redirected to %s, whose scheme %q is not supported", e.to, e.scheme)
	}
	return fmt.Sprintf("more than %d redirects", e.limit)
}

// checkRedirect follows at most limit redirects, and only to http and https
// URLs: the client would refuse other schemes anyway, but with a message
// that does not say a redirect led there.
func checkRedirect(limit int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if s := req.URL.Scheme; s != "http" && s != "https" {
			return &redirectError{to: req.URL.Redacted(), scheme: s}
		}
		if len(via) > limit {
			// A URL seen before means the chain would never end; saying so
			// keeps the model from retrying with a higher limit in mind.
			loop := false
			for _, v := range via {
				if v.URL.String() == req.URL.String() {
					loop = true
					break
				}
			}
			return &redirectError{limit: limit, to: req.URL.Redacted(), loop: loop}
		}
		return nil
	}
}

// Get fetches url (http or https only) and converts it. A non-2xx status is an error that says the status and the start of the body; a binary body (images, archives, PDFs, anything that is not text: decide by Content-Type and, when it is missing or generic like application/octet-stream, by sniffing with net/http.DetectContentType and a NUL-byte check) is an error that says what it was ("… is a binary file (image/png, 12.3 KiB); fetch_content reads text, HTML and JSON only"). Every error text is written for the model to read and act on, one line, and names the URL.
//
// The limits apply to this call whatever client is passed: Get uses a
// shallow copy of client whose redirect policy is l's, and bounds the whole
// call, body included, by l's timeout. The copy shares client's transport,
// and so its keep-alive connections. A nil client means a client made by
// NewClient(l) for this call only, whose connections are closed at the end.
//
// When ctx ends, the error wraps ctx.Err(). Running out of l.Timeout is a
// different, ordinary error that does not wrap context.DeadlineExceeded, so
// that a caller testing for its own cancellation does not mistake it for one.
func Get(ctx context.Context, client *http.Client, url string, l Limits) (*Page, error) {
	l = l.withDefaults()
	u, err := neturl.Parse(url)
	if err != nil {
		return nil, fmt.Errorf("fetch_content: %q is not a valid URL (%s); pass an absolute http:// or https:// URL", url, oneLine(unwrapURLError(err)))
	}
	shown := u.Redacted()
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return nil, fmt.Errorf("fetch_content: %s has no scheme; pass an absolute http:// or https:// URL", shown)
		}
		hint := ""
		if u.Scheme == "file" {
			hint = " (read local files with the file tools instead)"
		}
		return nil, fmt.Errorf("fetch_content: %s has the unsupported scheme %q; only http and https URLs can be fetched%s", shown, u.Scheme, hint)
	case u.Host == "":
		return nil, fmt.Errorf("fetch_content: %s has no host; pass an absolute http:// or https:// URL", shown)
	}

	if client == nil {
		client = NewClient(l)
		defer client.CloseIdleConnections()
	}
	c := *client
	c.CheckRedirect = checkRedirect(l.MaxRedirects)

	f := &fetch{ctx: ctx, shown: shown, limits: l}
	tctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	f.tctx = tctx

	req, err := http.NewRequestWithContext(tctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch_content: %s cannot be requested: %s", shown, oneLine(unwrapURLError(err)))
	}
	req.Header.Set("Accept", acceptHeader)
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.Do(req)
	if err != nil {
		return nil, f.failure(err, "")
	}
	defer resp.Body.Close()
	f.final = resp.Request.URL.String()
	if f.final != u.String() {
		f.shown = shown + " (redirected to " + resp.Request.URL.Redacted() + ")"
	}
	return f.convert(resp)
}

// fetch holds what one Get knows while it reads and converts the response.
type fetch struct {
	ctx    context.Context // the caller's context
	tctx   context.Context // ctx bounded by limits.Timeout
	shown  string          // the URL as error texts name it
	final  string          // the URL after redirects
	limits Limits
}

// convert reads resp's body within the limits and turns it into a Page, or
// into the error that explains why the model gets none.
func (f *fetch) convert(resp *http.Response) (*Page, error) {
	mediaType, params := parseContentType(resp.Header.Get("Content-Type"))
	k, decided := kindOf(mediaType)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, f.statusError(resp, mediaType, params)
	}

	// A declared binary type with a known length is refused before its body
	// is read, since nothing of it would reach the model.
	if decided && k == kindBinary && resp.ContentLength >= 0 {
		return nil, f.binaryError(mediaType, formatSize(resp.ContentLength))
	}

	body, truncated, err := readLimited(resp.Body, f.limits.MaxBytes)
	if err != nil {
		return nil, f.failure(err, fmt.Sprintf("after %d body bytes", len(body)))
	}
	if !decided || k != kindBinary {
		k, mediaType = sniff(k, decided, mediaType, body)
	}
	if k == kindBinary {
		size := formatSize(int64(len(body)))
		switch {
		case resp.ContentLength >= 0:
			size = formatSize(resp.ContentLength)
		case truncated:
			size = "more than " + formatSize(f.limits.MaxBytes)
		}
		return nil, f.binaryError(mediaType, size)
	}

	charset := params["charset"]
	if charset == "" && k == kindHTML {
		charset = metaCharset(body)
	}
	text := decodeText(body, charset, truncated)

	page := &Page{
		URL:         f.final,
		Status:      resp.StatusCode,
		ContentType: mediaType,
		Truncated:   truncated,
		Bytes:       int64(len(body)),
	}
	switch k {
	case kindHTML:
		c, err := toMarkdown(f.tctx, text, f.final, htmlBounds{markdown: int(f.limits.MaxBytes)})
		if err != nil {
			return nil, f.convertError(err)
		}
		page.Text, page.Notes = c.md, c.notes
	case kindJSON:
		page.Text = prettyJSON(text)
	default:
		page.Text = text
	}
	return page, nil
}

// readLimited reads r up to max bytes. It asks for one byte more, so that a
// body of exactly max bytes is not reported as cut.
func readLimited(r io.Reader, max int64) (body []byte, truncated bool, err error) {
	body, err = io.ReadAll(io.LimitReader(r, max+1))
	if int64(len(body)) > max {
		return body[:max], true, err
	}
	return body, false, err
}

// parseContentType returns the lowercased media type and its parameters. A
// header that does not parse still yields its media type, because servers
// send malformed parameters more often than malformed types.
func parseContentType(h string) (string, map[string]string) {
	if strings.TrimSpace(h) == "" {
		return "", map[string]string{}
	}
	mt, params, err := mime.ParseMediaType(h)
	if err != nil {
		mt, _, _ = strings.Cut(h, ";")
		params = map[string]string{}
	}
	return strings.ToLower(strings.TrimSpace(mt)), params
}

// oneLine collapses all whitespace, newlines included, to single spaces, so
// that an error text is one line whatever it quotes.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cut shortens s to n runes, marking the cut.
func cut(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// formatSize writes n bytes the way a person reads them.
func formatSize(n int64) string {
	switch {
	case n < 1<<10:
		if n == 1 {
			return "1 byte"
		}
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
}
