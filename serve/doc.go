// Package serve is mm's network transport: ACP over WebSocket and
// streamable HTTP on one endpoint, /acp, as the RFD "Streamable HTTP &
// WebSocket Transport" has it and the TypeScript SDK 2.4.0's AcpServer
// answers it; plus /healthz, /readyz and /metrics. It knows nothing of
// sessions: each connection is handed to a Connector as the stream of its
// client's messages, each already split into its members (the
// jsonrpc.Parse the transport routes by, which mm's ingress reads instead
// of parsing the message again), and mm's output, one line per message —
// and mm's ingress, order, bounds and errors apply to it as on stdio.
//
// Files: connector.go (what the transport asks of mm), server.go (options,
// routing, the drain), auth.go (tokens and origins), conn.go (one
// connection, whatever its transport: its place, mm's side, the requests
// mm owes an answer), inbox.go (the message stream into mm), message.go (a
// client message made one line, parsed once, and checked as the
// TypeScript SDK checks it), websocket.go, resume.go (a WebSocket connection
// that outlives its socket), stallconn.go (its socket's writes),
// streamable.go (POST, GET, DELETE), streams.go (the
// routing of mm's output to an HTTP connection's streams and their
// bounds), incoming.go (the server's room for client messages being read,
// and their time limit), sockets.go (the TCP connections no token has
// proven yet), forward.go (on a cluster node, a request for a connection
// another node holds, passed on to that node), metrics.go.
//
// Admission. Every request to /acp and /metrics needs an allowed Origin
// (or none; 403 otherwise) and a known bearer token (401 otherwise),
// checked before its body is read or its upgrade accepted. The token's
// name is the connection's owner (Client.Token); an HTTP connection is
// found only by the token that opened it. /healthz and /readyz need
// nothing: they say only whether the process serves. /readyz answers 503
// while the server drains, and while Options.Ready says no (a cluster
// node that has not joined): then a new connection is refused too, with
// 503 and a Retry-After.
//
// Bounds. At most Options.MaxConnections connections are open (503 past
// it), and as many TCP connections on which no request with a token has
// come (the oldest closed past it). One message is at most
// MaxMessageBytes, arrives whole within MessageTimeout, and takes its
// bytes, while it is read, from a room of MaxIncomingBytes for the whole
// server (it waits for room). What a client sends waits for mm to take it: the inbox holds no
// message, so a client faster than mm is pushed back by its socket. What
// mm writes waits for the client to read: on the socket (WebSocket), or in
// the connection's streams up to MaxBufferedBytes (HTTP); past that mm's
// writer waits. A client that takes nothing for StallTimeout is
// disconnected: its inbox closes and mm winds the connection down as when
// an editor closes stdin.
//
// Concurrency. Server's methods may be called from any goroutine. Per
// connection: one goroutine reads the client (the WebSocket handler, or
// the POST handlers, each with its own request), mm's writer calls the
// transport's Write one call at a time, and a goroutine waits for mm's
// side to end (connection.connect). Send never holds a lock while it
// waits; Write holds none while the client is slow. Locks: httpConn.mu
// before Server.mu and connection.mu; no other nesting.
package serve
