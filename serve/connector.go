package serve

import (
	"context"

	"github.com/mm-agent/mm/jsonrpc"
)

// Connector opens one ACP connection: the same ingress, ordered writer and
// bounds as stdio. in gives the client's JSON-RPC messages, each parsed
// once, by the transport, which read them to route them; mm writes its
// messages to out, each with what the transport routes it by (its id,
// its session, whether it answers a request, the request's Tag): the
// transport never reads mm's bytes again. The connection ends when in
// reaches EOF (the client left) or ctx ends.
type Connector interface {
	Connect(ctx context.Context, c Client, in jsonrpc.Source, out jsonrpc.Writer) (Conn, error)
}

// Client says who is on the other end of a connection.
type Client struct {
	// Token is the name of the token the client presented: the owner of
	// the sessions it creates.
	Token string
	// Transport is "websocket" or "http".
	Transport string
}

// Conn is one open ACP connection: mm's side of it, whose tables of
// requests in flight are the only ones (jsonrpc.Conn's).
type Conn interface {
	// Wait returns once the connection is over and its answers written or
	// abandoned.
	Wait(ctx context.Context)
	// Idle waits until every request of the client's read has its answer
	// written (true), or ctx ends or the connection closes (false).
	Idle(ctx context.Context) bool
	// Awaits says whether id is a call of mm's waiting for the client's
	// answer, and the session the call is about ("" for the
	// connection's).
	Awaits(id jsonrpc.ID) (session string, ok bool)
}

// The transports, as Client.Transport and the metrics' label name them.
const (
	WebSocket = "websocket"
	HTTP      = "http"
)
