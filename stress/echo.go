package stress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/gate"
)

// Echo is the baseline mm's throughput over pipes is held against: a
// JSON-RPC server that answers every request with its params, driven by the
// harness's client over the same kind of pipes. It comes in two builds: on
// acp-go-sdk's JSON-RPC connection, the stack mm itself serves on (the
// baseline), and hand-rolled (the floor of what pipes and JSON allow).

// ServeEchoSDK serves the echo on acp-go-sdk's JSON-RPC connection until r
// ends.
func ServeEchoSDK(r io.Reader, w io.Writer) error {
	g := gate.New(r)
	conn := acp.NewConnection(func(_ context.Context, _ string, params json.RawMessage) (any, *acp.RequestError) {
		return params, nil
	}, w, g)
	conn.SetLogger(slog.New(slog.DiscardHandler)) // not synchronised with the reader: it waits
	g.Open()
	<-conn.Done()
	return nil
}

// ServeEcho answers every JSON-RPC request line read from r with a response
// carrying the request's params as its result, until r ends.
func ServeEcho(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	bw := bufio.NewWriter(w)
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Params json.RawMessage `json:"params"`
	}
	for sc.Scan() {
		msg.ID, msg.Params = nil, nil
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.ID == nil {
			continue
		}
		bw.WriteString(`{"jsonrpc":"2.0","id":`)
		bw.Write(msg.ID)
		bw.WriteString(`,"result":`)
		if msg.Params == nil {
			bw.WriteString("null")
		} else {
			bw.Write(msg.Params)
		}
		bw.WriteString("}\n")
		// Flush when no more input is buffered: one write per burst.
		if sc.Err() == nil {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// EchoReport is the baseline's figure.
type EchoReport struct {
	Requests      int64   `json:"requests"`
	Elapsed       float64 `json:"elapsed_sec"`
	RequestsPerS  float64 `json:"requests_per_sec"`
	Concurrency   int     `json:"concurrency"`
	ServerCommand string  `json:"server"`
}

// RunEcho starts `self -echo-server <kind>` ("sdk" or "raw") and sends
// sessions × turns requests,
// sessions at a time — the same shape as a harness run — through the SDK
// client (a request "_mm/echo" with a prompt's params).
func RunEcho(ctx context.Context, self, kind string, sessions, turns int) (*EchoReport, error) {
	cmd := exec.Command(self, "-echo-server", kind)
	stdin, stdout, err := startPiped(cmd, os.Stderr)
	if err != nil {
		return nil, err
	}
	conn := newClientConn(newClient(), lines(stdin, stdout))
	params := textPrompt("20260101-000000-00000000", "ping s0 t0")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := 0; t < turns; t++ {
				if _, err := conn.call(ctx, "_mm/echo", params, ""); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	conn.close()
	stdin.Close()
	_ = cmd.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("echo: %w", firstErr)
	}
	n := int64(sessions * turns)
	return &EchoReport{Requests: n, Elapsed: elapsed.Seconds(), RequestsPerS: float64(n) / elapsed.Seconds(), Concurrency: sessions, ServerCommand: self + " -echo-server " + kind}, nil
}
