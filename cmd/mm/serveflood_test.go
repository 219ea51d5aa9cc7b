package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/serve/servetest"
)

// TestServePreAuthFlood: while sockets that send nothing flood `mm serve`
// (6,000 at least, as long as the clients work; serve.maxConnections, 256,
// of them at most are kept), eight clients connect over WebSocket and
// work — initialize, a session, a prompt — and none of them is reset: the
// sockets closed to make room are silent ones, not those of clients that
// sent their request (issue 42: 3 of 8 were reset, closed as the
// "oldest"). Each client's upgrade comes in two writes 300 ms apart, as
// over a slow link: long enough for hundreds of silent sockets to come
// after it.
func TestServePreAuthFlood(t *testing.T) {
	testwait.Short(t, "a flood of 6,000 sockets")
	bin := mmBin
	if b := os.Getenv("MM_FLOOD_BIN"); b != "" {
		bin = b // another build, for a figure before a change
	}
	s := startServeBin(t, bin, t.TempDir(), "config.yaml", "", "MM_SERVE_TOKEN="+serveToken)
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	const flood, clients = 6000, 8
	var dialed, closedByServer atomic.Int64
	floodDone, clientsDone := make(chan struct{}), make(chan struct{})
	var socks sync.WaitGroup
	go func() {
		defer close(floodDone)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for dialed.Add(1) <= flood || !isClosed(clientsDone) {
					c, err := net.Dial("tcp", u.Host)
					if err != nil {
						continue
					}
					socks.Add(1)
					go func() {
						defer socks.Done()
						defer c.Close()
						// Silent until the server closes it, or the test ends.
						_ = c.SetReadDeadline(time.Now().Add(testwait.Hang))
						if _, err := c.Read(make([]byte, 1)); err == io.EOF {
							closedByServer.Add(1)
						}
					}()
				}
			}()
		}
		wg.Wait()
	}()
	t.Cleanup(func() { socks.Wait() })
	// The clients come while the flood goes on, one after another.
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		for dialed.Load() < int64((i+1)*flood/(clients+2)) {
			time.Sleep(time.Millisecond)
		}
		wg.Add(1)
		dir := s.project(t)
		go func() {
			defer wg.Done()
			if err := floodClient(ctx, s, dir); err != nil {
				failed.Add(1)
				t.Errorf("client %d, connected after %d sockets of the flood: %v", i, (i+1)*flood/(clients+2), err)
			}
		}()
	}
	wg.Wait()
	close(clientsDone)
	<-floodDone
	t.Logf("%d of %d clients failed during a flood of %d silent sockets; the server closed %d of them so far",
		failed.Load(), clients, dialed.Load()-8, closedByServer.Load())
	_ = s.cmd.Process.Kill() // the silent sockets end with it
}

// floodClient is one client's work: connect, initialize, a session, a
// prompt answered.
func floodClient(ctx context.Context, s *served, dir string) error {
	slow := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowStart{Conn: c}, nil
	}}}
	ws, _, err := servetest.DialWebSocketWith(ctx, s.ws, serveToken, nil, slow)
	if err != nil {
		return err
	}
	defer ws.Close()
	conn := acptest.Dial(acptest.NewClient(), ws, ws)
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		return err
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: dir, McpServers: []acp.McpServer{}})
	if err != nil {
		return err
	}
	resp, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("ping")}})
	if err != nil {
		return err
	}
	if resp.StopReason != acp.StopReasonEndTurn {
		return &stopError{resp.StopReason}
	}
	return nil
}

// slowStart is a client's socket whose first write goes in two, 300 ms
// apart, as over a slow link.
type slowStart struct {
	net.Conn
	once sync.Once
}

func (c *slowStart) Write(p []byte) (int, error) {
	split := false
	c.once.Do(func() { split = len(p) > 16 })
	if !split {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p[:16])
	if err != nil {
		return n, err
	}
	time.Sleep(300 * time.Millisecond)
	m, err := c.Conn.Write(p[16:])
	return n + m, err
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

type stopError struct{ r acp.StopReason }

func (e *stopError) Error() string { return "the prompt ended " + string(e.r) }
