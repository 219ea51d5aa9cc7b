package mcpclient

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"
)

// A page of tools/list is cut to the server's MaxTools (and one more, so
// that the cut is seen) before the SDK decodes it: the SDK turns every
// tool of a page into structures and checks each (a page of 100,000
// small tools, 8 MB on the wire, cost 280 MB of heap and seconds of CPU
// before a single tool reached this package), and a server may list again
// whenever it likes. The SDK bounds the page itself (16 MiB a line for
// stdio).

// boundedTransport wraps a transport's connection in a boundedConn.
type boundedTransport struct {
	inner mcp.Transport
	c     *conn
}

func (t *boundedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Connection: inner, max: maxTools(t.c.srv) + 1, cut: &t.c.cut}, nil
}

// boundedConn cuts the tools/list pages read from its connection to max
// tools, and then drops their nextCursor, so that the listing ends there;
// it sets cut when it did.
type boundedConn struct {
	mcp.Connection
	max int
	cut *atomic.Bool

	mu sync.Mutex
	// lists are the ids of the tools/list requests written and not yet
	// answered: one at a time, as conn.list asks.
	lists map[jsonrpc.ID]bool
}

func (b *boundedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "tools/list" && r.ID.IsValid() {
		b.mu.Lock()
		if b.lists == nil {
			b.lists = map[jsonrpc.ID]bool{}
		}
		b.lists[r.ID] = true
		b.mu.Unlock()
	}
	return b.Connection.Write(ctx, msg)
}

func (b *boundedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := b.Connection.Read(ctx)
	r, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok || !r.ID.IsValid() {
		return msg, err
	}
	b.mu.Lock()
	list := b.lists[r.ID]
	delete(b.lists, r.ID)
	b.mu.Unlock()
	if list && r.Error == nil {
		if cut, ok := cutTools(r.Result, b.max); ok {
			r.Result = cut
			b.cut.Store(true)
		}
	}
	return msg, nil
}

// cutTools returns a tools/list result with its first max tools only and
// no nextCursor, when it has more than max; ok is false otherwise, or when
// the result is not an object with a tools array (the SDK then says why).
func cutTools(result []byte, max int) (cut []byte, ok bool) {
	tools := gjson.GetBytes(result, "tools")
	if !tools.IsArray() {
		return nil, false
	}
	n, end := 0, 0
	tools.ForEach(func(_, v gjson.Result) bool {
		n++
		if n <= max {
			end = v.Index + len(v.Raw)
		}
		return n <= max
	})
	if n <= max {
		return nil, false
	}
	out := make([]byte, 0, end-tools.Index+len(`{"tools":]}`))
	out = append(out, `{"tools":`...)
	out = append(out, result[tools.Index:end]...)
	return append(out, "]}"...), true
}
