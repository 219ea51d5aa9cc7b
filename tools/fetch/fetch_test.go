package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// test closes its servers and its clients' idle connections, so nothing of a
// fetch may be left running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newServer starts a real HTTP server on 127.0.0.1 that is closed when the
// test ends.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newClient returns NewClient(l) whose idle connections are closed when the
// test ends, before its server is closed (cleanups run last in, first out).
func newClient(t *testing.T, l Limits) *http.Client {
	t.Helper()
	c := NewClient(l)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// wantError checks the promises every error text makes to the model: it is
// one line, it names the URL, and it says what the test expects.
func wantError(t *testing.T, err error, url string, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Get(%s): no error, want one containing %q", url, wants)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if !strings.Contains(msg, url) {
		t.Errorf("error does not name the URL %s: %q", url, msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q: %q", w, msg)
		}
	}
}

func get(t *testing.T, c *http.Client, url string, l Limits) *Page {
	t.Helper()
	p, err := Get(context.Background(), c, url, l)
	if err != nil {
		t.Fatalf("Get(%s): %v", url, err)
	}
	return p
}

const testHTML = `<!doctype html>
<html><head><title>Fetch  Guide</title>
<style>.secret-style { color: red }</style>
<script>var secretScript = "do not show";</script>
</head><body>
<nav><a href="/nav-only">Navigation only</a></nav>
<h1>Getting started</h1>
<p>Read <a href="reference.html">the reference</a> or <a href="/abs/path">this</a>.</p>
<ul><li>first item</li><li>second item</li></ul>
<pre><code class="language-go">func main() {
	fmt.Println("hello")
}</code></pre>
<table><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody><tr><td>alpha</td><td>1</td></tr></tbody></table>
<img src="img/logo.png" alt="logo">
<script>document.write("inline secret")</script>
<noscript>enable javascript</noscript>
<footer>Footer only text</footer>
</body></html>`

func TestHTMLToMarkdown(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/docs/guide.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		fmt.Fprint(w, testHTML)
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	p := get(t, c, srv.URL+"/docs/guide.html", Limits{})
	if p.Status != 200 || p.ContentType != "text/html" || p.Truncated || p.Bytes != int64(len(testHTML)) {
		t.Errorf("page = status %d, type %q, truncated %v, bytes %d; want 200, text/html, false, %d",
			p.Status, p.ContentType, p.Truncated, p.Bytes, len(testHTML))
	}
	if p.URL != srv.URL+"/docs/guide.html" {
		t.Errorf("URL = %q", p.URL)
	}
	for _, want := range []string{
		"# Getting started",
		"- first item\n- second item",
		"[the reference](" + srv.URL + "/docs/reference.html)",
		"[this](" + srv.URL + "/abs/path)",
		"![logo](" + srv.URL + "/docs/img/logo.png)",
		"```go\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n```",
		"| Name | Value |",
		"| alpha | 1 |",
	} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, p.Text)
		}
	}
	for _, absent := range []string{"secretScript", "inline secret", "secret-style", "enable javascript", "Navigation only", "Footer only text", "<p>", "Fetch Guide"} {
		if strings.Contains(p.Text, absent) {
			t.Errorf("Markdown contains %q:\n%s", absent, p.Text)
		}
	}
	if !strings.HasPrefix(p.Text, "# Getting started") {
		t.Errorf("a page that starts with a heading got another first line:\n%s", p.Text)
	}
}

func TestHTMLTitleBecomesHeading(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><head><title> Release
		notes </title><base href="https://example.org/base/"></head>
		<body><svg><title>icon</title></svg><p>Version 2 adds <a href="v2.html">things</a>.</p></body></html>`)
	})
	srv := newServer(t, mux)
	p := get(t, newClient(t, Limits{}), srv.URL+"/", Limits{})
	want := "# Release notes\n\nVersion 2 adds [things](https://example.org/base/v2.html)."
	if p.Text != want {
		t.Errorf("Text = %q, want %q", p.Text, want)
	}
}

func TestTextAndJSON(t *testing.T) {
	const text = "line one\n\tindented <not html> & {not json}\nlast line\n"
	mux := http.NewServeMux()
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, text)
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"name":"mm","tags":["a","b"],"nested":{"n":12345678901234567890}}`)
	})
	mux.HandleFunc("/vnd-json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.api+json")
		fmt.Fprint(w, `[1,2]`)
	})
	mux.HandleFunc("/bad-json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"cut": [1, 2`)
	})
	mux.HandleFunc("/untyped-json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		fmt.Fprint(w, `{"a":true}`)
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=ISO-8859-1")
		w.Write([]byte("caf\xe9 costs \x8010"))
	})
	mux.HandleFunc("/meta-charset", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><head><meta charset=\"windows-1252\"></head><body><h1>Na\xefve r\xe9sum\xe9</h1></body></html>"))
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	tests := []struct {
		path, contentType, text string
	}{
		{"/text", "text/plain", text},
		{"/json", "application/json", "{\n  \"name\": \"mm\",\n  \"tags\": [\n    \"a\",\n    \"b\"\n  ],\n  \"nested\": {\n    \"n\": 12345678901234567890\n  }\n}"},
		{"/vnd-json", "application/vnd.api+json", "[\n  1,\n  2\n]"},
		{"/bad-json", "application/json", `{"cut": [1, 2`},
		{"/untyped-json", "application/json", "{\n  \"a\": true\n}"},
		{"/latin1", "text/plain", "café costs €10"},
		{"/meta-charset", "text/html", "# Naïve résumé"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p := get(t, c, srv.URL+tt.path, Limits{})
			if p.ContentType != tt.contentType {
				t.Errorf("ContentType = %q, want %q", p.ContentType, tt.contentType)
			}
			if p.Text != tt.text {
				t.Errorf("Text = %q, want %q", p.Text, tt.text)
			}
		})
	}
}

func pngBytes(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBinaryRefused(t *testing.T) {
	pngData := pngBytes(t)
	nulData := append([]byte("looks like text at first"), 0, 1, 2, 3, 0, 0, 'x')
	mux := http.NewServeMux()
	mux.HandleFunc("/image.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write(pngData)
	})
	mux.HandleFunc("/untyped", func(w http.ResponseWriter, r *http.Request) {
		// A nil Content-Type keeps net/http from sniffing one itself, so
		// the client sees no type at all.
		w.Header()["Content-Type"] = nil
		w.Write(pngData)
	})
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(nulData)
	})
	mux.HandleFunc("/mislabelled", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(nulData)
	})
	mux.HandleFunc("/streamed.pdf", func(w http.ResponseWriter, r *http.Request) {
		// Flushing before the body hides its length from the client.
		w.Header().Set("Content-Type", "application/pdf")
		w.(http.Flusher).Flush()
		w.Write(bytes.Repeat([]byte("%PDF-1.7 "), 400))
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	tests := []struct {
		path string
		what string
	}{
		{"/image.png", fmt.Sprintf("is a binary file (image/png, %d bytes); fetch_content reads text, HTML and JSON only", len(pngData))},
		{"/untyped", fmt.Sprintf("is a binary file (image/png, %d bytes)", len(pngData))},
		{"/blob", fmt.Sprintf("is a binary file (application/octet-stream, %d bytes)", len(nulData))},
		{"/mislabelled", "is a binary file (text/plain, 31 bytes)"},
		{"/streamed.pdf", "is a binary file (application/pdf, 3.5 KiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p, err := Get(context.Background(), c, srv.URL+tt.path, Limits{})
			if p != nil {
				t.Errorf("got a page for a binary body: %+v", p)
			}
			wantError(t, err, srv.URL+tt.path, tt.what)
		})
	}

	// The same "big" body cut at MaxBytes cannot report its full size.
	url := srv.URL + "/streamed.pdf"
	_, err := Get(context.Background(), c, url, Limits{MaxBytes: 100})
	wantError(t, err, url, "is a binary file (application/pdf, more than 100 bytes)")
}

func TestStatusError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html><head><title>Not Found</title></head><body><h1>Oops</h1>\n<p>No page\n at /missing here.</p></body></html>")
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, strings.Repeat("stack trace line\n", 100), http.StatusInternalServerError)
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	url := srv.URL + "/missing"
	p, err := Get(context.Background(), c, url, Limits{})
	if p != nil {
		t.Errorf("got a page for a 404: %+v", p)
	}
	wantError(t, err, url, "HTTP 404 Not Found", "# Oops No page at /missing here.")

	url = srv.URL + "/broken"
	_, err = Get(context.Background(), c, url, Limits{})
	wantError(t, err, url, "HTTP 500 Internal Server Error", "try again later", "the body starts: stack trace line stack trace line", "…")
	if n := utf8.RuneCountInString(err.Error()); n > 500 {
		t.Errorf("error quotes too much of the body (%d runes): %s", n, err)
	}
}

func TestRedirects(t *testing.T) {
	mux := http.NewServeMux()
	for i := 1; i <= 3; i++ {
		mux.HandleFunc(fmt.Sprintf("/hop%d", i), func(w http.ResponseWriter, r *http.Request) {
			next := "/final"
			if i < 3 {
				next = fmt.Sprintf("/hop%d", i+1)
			}
			http.Redirect(w, r, next, http.StatusFound)
		})
	}
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "arrived")
	})
	mux.HandleFunc("/loop-a", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop-b", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/loop-b", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop-a", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/to-ftp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://files.example.org/x.tar", http.StatusFound)
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	t.Run("chain within the limit", func(t *testing.T) {
		p := get(t, c, srv.URL+"/hop1", Limits{})
		if p.URL != srv.URL+"/final" || p.Text != "arrived" || p.Status != 200 {
			t.Errorf("page = %q %d %q, want the final URL, 200 and its text", p.URL, p.Status, p.Text)
		}
	})
	t.Run("chain at a lower limit", func(t *testing.T) {
		url := srv.URL + "/hop1"
		_, err := Get(context.Background(), c, url, Limits{MaxRedirects: 2})
		wantError(t, err, url, "too many redirects", "more than 2 redirects (the limit)")
	})
	t.Run("loop", func(t *testing.T) {
		url := srv.URL + "/loop-a"
		_, err := Get(context.Background(), c, url, Limits{})
		wantError(t, err, url, "redirect loop", "more than 5 redirects (the limit)")
	})
	t.Run("no redirects allowed", func(t *testing.T) {
		url := srv.URL + "/hop3"
		_, err := Get(context.Background(), c, url, Limits{MaxRedirects: -1})
		wantError(t, err, url, "more than 0 redirects")
	})
	t.Run("to an unsupported scheme", func(t *testing.T) {
		url := srv.URL + "/to-ftp"
		_, err := Get(context.Background(), c, url, Limits{})
		wantError(t, err, url, `scheme "ftp" is not supported`, "ftp://files.example.org/x.tar")
	})
}

func TestTruncated(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(bytes.Repeat([]byte("0123456789"), 1000))
	})
	mux.HandleFunc("/accents", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(strings.Repeat("é", 1000)))
	})
	mux.HandleFunc("/big.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><h1>Long</h1><ul>")
		for i := range 2000 {
			fmt.Fprintf(w, "<li>item %d</li>", i)
		}
		fmt.Fprint(w, "</ul></body></html>")
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	p := get(t, c, srv.URL+"/big", Limits{MaxBytes: 1000})
	if !p.Truncated || p.Bytes != 1000 || p.Text != strings.Repeat("0123456789", 100) {
		t.Errorf("page = truncated %v, bytes %d, %d chars of text; want true, 1000, 1000", p.Truncated, p.Bytes, len(p.Text))
	}

	p = get(t, c, srv.URL+"/big", Limits{MaxBytes: 10000})
	if p.Truncated || p.Bytes != 10000 {
		t.Errorf("a body of exactly MaxBytes: truncated %v, bytes %d; want false, 10000", p.Truncated, p.Bytes)
	}

	// 999 bytes end in the middle of the 500th "é", which is dropped.
	p = get(t, c, srv.URL+"/accents", Limits{MaxBytes: 999})
	if !p.Truncated || p.Text != strings.Repeat("é", 499) {
		t.Errorf("page = truncated %v, text %q; want true and 499 whole runes", p.Truncated, p.Text)
	}

	p = get(t, c, srv.URL+"/big.html", Limits{MaxBytes: 2000})
	if !p.Truncated || !strings.HasPrefix(p.Text, "# Long\n\n- item 0\n- item 1\n") || strings.Contains(p.Text, "item 1999") {
		t.Errorf("truncated HTML: truncated %v, text:\n%s", p.Truncated, p.Text)
	}
}

// stall answers after the client has given up, or after the hang bound
// should the client never give up, so that a test failure cannot hang the
// server's Close for ever. The limit a test sets is the only way out.
func stall(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(testwait.Hang):
	}
}

func TestTimeout(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		stall(w, r)
		fmt.Fprint(w, "too late")
	})
	mux.HandleFunc("/stall-body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "first part ")
		w.(http.Flusher).Flush()
		stall(w, r)
	})
	srv := newServer(t, mux)
	l := Limits{Timeout: 300 * time.Millisecond}

	for _, path := range []string{"/stall", "/stall-body"} {
		t.Run(path, func(t *testing.T) {
			url := srv.URL + path
			c := newClient(t, l)
			_, err := Get(context.Background(), c, url, l)
			wantError(t, err, url, "timed out", "300ms")
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Errorf("a timeout must not look like the caller's cancellation: %v", err)
			}

			// A client with no timeout of its own is still bound by the
			// limits passed to Get.
			c = newClient(t, Limits{Timeout: time.Hour})
			_, err = Get(context.Background(), c, url, l)
			wantError(t, err, url, "timed out")
		})
	}
}

func TestCancel(t *testing.T) {
	entered := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		stall(w, r)
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})
	url := srv.URL + "/slow"

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Get(ctx, c, url, Limits{})
		done <- err
	}()
	<-entered
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Get after cancel = %v, want an error wrapping context.Canceled", err)
	}
	wantError(t, err, url, "cancelled")

	_, err = Get(ctx, c, url, Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context = %v, want an error wrapping context.Canceled", err)
	}
}

func TestBadURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"file:///etc/passwd", `unsupported scheme "file"`},
		{"ftp://example.org/pub/x.tar", `unsupported scheme "ftp"`},
		{"example.org/page", "has no scheme"},
		{"http:///path-only", "has no host"},
	}
	for _, tt := range tests {
		p, err := Get(context.Background(), nil, tt.url, Limits{})
		if p != nil {
			t.Errorf("Get(%s) returned a page", tt.url)
		}
		wantError(t, err, tt.url, tt.want)
	}
	_, err := Get(context.Background(), nil, "http://[::1", Limits{})
	wantError(t, err, "http://[::1", "is not a valid URL")
}

func TestRequestHeadersAndNilClient(t *testing.T) {
	var mu sync.Mutex
	var agents, accepts []string
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.Header.Get("User-Agent"))
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/page", http.StatusSeeOther)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv := newServer(t, mux)

	get(t, nil, srv.URL+"/redirect", Limits{})
	// A request made with the client but not by Get is named too.
	resp, err := newClient(t, Limits{}).Get(srv.URL + "/direct")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	mu.Lock()
	defer mu.Unlock()
	if len(agents) != 3 {
		t.Fatalf("server saw %d requests, want 3", len(agents))
	}
	for i, ua := range agents {
		if ua != "mm (bash-first coding agent)" {
			t.Errorf("request %d: User-Agent %q", i, ua)
		}
	}
	for i, a := range accepts[:2] {
		for _, want := range []string{"text/html", "text/markdown", "text/plain", "application/json"} {
			if !strings.Contains(a, want) {
				t.Errorf("request %d: Accept %q lacks %s", i, a, want)
			}
		}
	}
}

// TestConcurrent shares one client between many Gets, which the race
// detector checks.
func TestConcurrent(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/{n}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<title>t</title><h2>Page %s</h2><a href=\"x\">x</a>", r.PathValue("n"))
	})
	srv := newServer(t, mux)
	c := newClient(t, Limits{})

	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			p, err := Get(context.Background(), c, fmt.Sprintf("%s/%d", srv.URL, i), Limits{})
			if err != nil {
				t.Error(err)
				return
			}
			if want := fmt.Sprintf("## Page %d\n\n[x](%s/x)", i, srv.URL); p.Text != want {
				t.Errorf("Text = %q, want %q", p.Text, want)
			}
		})
	}
	wg.Wait()
}
