// Package servetest connects to `mm serve` the way an editor does, for
// tests and the stress harness: a WebSocket or a streamable HTTP client
// whose two ends are line streams — Write takes the client's JSON-RPC
// messages, one per line; Read gives the server's, one per line — ready
// for acp-go-sdk's ClientSideConnection.
//
// Concurrency: Write may be called from one goroutine at a time (the SDK
// serialises its writes), Read from one; Close from any. A stream whose
// Read is not called stops taking the server's messages, as an editor
// that stops reading does: the server's writes wait, and its stall
// timeout applies.
package servetest

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/coder/websocket"
)

// Stream is one client connection.
type Stream interface {
	io.ReadWriteCloser
}

// WebSocket is a client connection over WebSocket.
type WebSocket struct {
	ws  *websocket.Conn
	cur []byte
}

// DialWebSocket opens a WebSocket to url (ws:// or wss://…/acp) with the
// bearer token (none when empty) and header's fields. On a refused upgrade
// it returns the server's response with the error.
func DialWebSocket(ctx context.Context, url, token string, header http.Header) (*WebSocket, *http.Response, error) {
	return DialWebSocketWith(ctx, url, token, header, nil)
}

// DialWebSocketWith is DialWebSocket through client (nil is
// http.DefaultClient), e.g. one that trusts a test certificate.
func DialWebSocketWith(ctx context.Context, url, token string, header http.Header, client *http.Client) (*WebSocket, *http.Response, error) {
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, HTTPClient: client})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(-1)
	return &WebSocket{ws: ws}, resp, nil
}

// Write sends each line of p as one text frame.
func (c *WebSocket) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		if err := c.ws.Write(context.Background(), websocket.MessageText, line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// WriteFrame sends one frame as it is (a test's malformed message).
func (c *WebSocket) WriteFrame(typ websocket.MessageType, b []byte) error {
	return c.ws.Write(context.Background(), typ, b)
}

// Read gives the server's frames, each one line.
func (c *WebSocket) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		_, b, err := c.ws.Read(context.Background())
		if err != nil {
			return 0, err
		}
		c.cur = append(b, '\n')
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// Close closes the socket (a normal closure).
func (c *WebSocket) Close() error { return c.ws.Close(websocket.StatusNormalClosure, "") }

// CloseStatus is the code of the close frame that ended err's connection,
// -1 if none did.
func CloseStatus(err error) int { return int(websocket.CloseStatus(err)) }
