package serve_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/serve"
)

// TestSocketsBeforeAToken: connections on which no request with a known
// token has come are at most serve.maxConnections, the oldest closed first
// (issue 28: 21,000 redialled connections held 12,431 descriptors); a
// refused request closes its socket; a client with a token still gets in.
func TestSocketsBeforeAToken(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MaxConnections = 4 })
	addr := strings.TrimSuffix(strings.TrimPrefix(e.url, "http://"), "/acp")
	// Each silent connection waits for the server to close it.
	var closed atomic.Int32
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed.Add(1)
			}
		}()
	}
	waitFor(t, func() bool { return closed.Load() >= 16 })
	// A wrong token is answered, and its socket closed.
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(e.url, "/acp")+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer wrong-token-wrong-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("a wrong token: %d, close %v", resp.StatusCode, resp.Close)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a client with a token: %d", resp.StatusCode)
	}
}

// TestSocketsThatSpokeStay: a socket whose client has sent part of its
// request is not closed to make room for silent ones that came after it;
// the silent ones are (issue 42: a flood of silent sockets reset clients
// that had sent their request, closed as the oldest).
func TestSocketsThatSpokeStay(t *testing.T) {
	e := newEnv(t, func(o *serve.Options, _ *configs.Config) { o.MaxConnections = 4 })
	addr := strings.TrimSuffix(strings.TrimPrefix(e.url, "http://"), "/acp")
	spoke, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer spoke.Close()
	if _, err := spoke.Write([]byte("GET /metrics HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	var closed atomic.Int32
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed.Add(1)
			}
		}()
	}
	waitFor(t, func() bool { return closed.Load() >= 17 }) // 20 silent ones and the one that spoke, 4 kept
	if _, err := spoke.Write([]byte("Host: mm\r\nAuthorization: Bearer " + token + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(spoke), nil)
	if err != nil {
		t.Fatalf("the socket that spoke first: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the socket that spoke first: %s", resp.Status)
	}
}
