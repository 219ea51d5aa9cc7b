package serve

import (
	"context"
	"io"

	"github.com/mm-agent/mm/jsonrpc"
)

// Connector opens one ACP connection: the same ingress, ordered writer and
// bounds as stdio. in gives the client's JSON-RPC messages, each parsed
// once, by the transport, which read them to route them; mm writes its
// messages on out, one per line, each Write whole lines. The connection
// ends when in reaches EOF (the client left) or ctx ends.
type Connector interface {
	Connect(ctx context.Context, c Client, in jsonrpc.Source, out io.Writer) (Conn, error)
}

// Client says who is on the other end of a connection.
type Client struct {
	// Token is the name of the token the client presented: the owner of
	// the sessions it creates.
	Token string
	// Transport is "websocket" or "http".
	Transport string
}

// Conn is one open ACP connection.
type Conn interface {
	// Wait returns once the connection is over and its answers written or
	// abandoned.
	Wait(ctx context.Context)
}

// The transports, as Client.Transport and the metrics' label name them.
const (
	WebSocket = "websocket"
	HTTP      = "http"
)
