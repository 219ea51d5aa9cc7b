package connect

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoRedirects: a server that redirects the upgrade elsewhere (another
// port of the same host) is not followed, so the token does not go there
// (issue 28: it did); the error says so.
func TestNoRedirects(t *testing.T) {
	var reached atomic.Int32
	var token atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		token.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusTeapot)
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/acp", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	u, err := URL(redirector.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, Options{URL: u, Token: "secret-token-of-sixteen", MaxLine: 1 << 20,
		Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "does not follow redirects") {
		t.Errorf("a redirect: %v", err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect was followed %d time(s), the token sent: %q", n, token.Load())
	}
}
