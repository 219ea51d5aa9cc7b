package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/valyala/fastjson"
)

// rpc is the harness's own JSON-RPC client side. The SDK's client decodes
// every message several times and queues at most 1,024 notifications before
// it drops the connection: under a thousand busy sessions it became the
// bottleneck of the measure, and then broke it. This client decodes each
// message once, only the fields the checks read, and hands notifications to
// their session's tracker in arrival order on its reader goroutine.
type rpc struct {
	wire   wire
	nextID uint64

	mu      sync.Mutex
	pending map[uint64]chan rpcReply
	// gaveUp holds the requests whose caller stopped waiting (its context
	// ended): an answer to one of them is late, not a second answer.
	gaveUp map[uint64]bool
	// extra counts the responses to a request that was already answered,
	// or never sent: every request must be answered exactly once.
	extra  int64
	closed error
	done   chan struct{}

	onUpdate     func(sessionID string, u *update)
	onPermission func(sessionID, callID string) (optionID string)
}

type rpcReply struct {
	result json.RawMessage
	err    *rpcError
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string {
	s := e.Message
	var d struct {
		Error string `json:"error"`
	}
	// mm's own failures carry their reason in the message and in data
	// both: it is said once.
	if json.Unmarshal(e.Data, &d) == nil && d.Error != "" && d.Error != s {
		s += ": " + d.Error
	}
	return s
}

// update is the part of a session/update the checks read.
type update struct {
	Kind       string
	Content    chunkContent
	ToolCallID string
	Status     string
}

// chunkContent is a chunk's content block; a tool call's content (a list)
// is skipped.
type chunkContent struct {
	Type string
	Text string
}

// text returns a chunk's text.
func (u *update) text() (string, bool) {
	return u.Content.Text, u.Content.Type == "text"
}

// newRPC starts the client on w; its reader runs until w ends.
func newRPC(w wire) *rpc {
	c := &rpc{wire: w, pending: map[uint64]chan rpcReply{}, gaveUp: map[uint64]bool{}, done: make(chan struct{})}
	go c.read()
	return c
}

// close ends the sending side after what is queued is written.
func (c *rpc) close() error { return c.wire.close() }

// read decodes each message once with fastjson (encoding/json was half the
// harness's CPU, and the harness shares the machine with what it measures),
// after a strict validation: a message mm gets wrong must not pass.
func (c *rpc) read() {
	var p fastjson.Parser
	var err error
	for {
		var line []byte
		if line, err = c.wire.next(); err != nil {
			break
		}
		var msg *fastjson.Value
		if fastjson.ValidateBytes(line) == nil {
			msg, _ = p.ParseBytes(line)
		}
		if msg == nil || msg.Type() != fastjson.TypeObject {
			if bytes.Contains(line, []byte(`"session/update"`)) && c.onUpdate != nil {
				// Never dropped silently: a notification the harness
				// cannot read counts against the run.
				c.onUpdate("", &update{Kind: "unreadable"})
			}
			continue
		}
		method := string(msg.GetStringBytes("method"))
		id := msg.Get("id")
		if id != nil && id.Type() == fastjson.TypeNull {
			id = nil
		}
		switch {
		case method == "session/update":
			if c.onUpdate != nil {
				params := msg.Get("params")
				u := params.Get("update")
				up := update{
					Kind:       string(u.GetStringBytes("sessionUpdate")),
					ToolCallID: string(u.GetStringBytes("toolCallId")),
					Status:     string(u.GetStringBytes("status")),
				}
				if content := u.Get("content"); content != nil && content.Type() == fastjson.TypeObject {
					up.Content = chunkContent{Type: string(content.GetStringBytes("type")), Text: string(content.GetStringBytes("text"))}
				}
				c.onUpdate(string(params.GetStringBytes("sessionId")), &up)
			}
		case method == "session/request_permission" && id != nil:
			params := msg.Get("params")
			sid, callID := string(params.GetStringBytes("sessionId")), string(params.GetStringBytes("toolCall", "toolCallId"))
			id := id.MarshalTo(nil)
			go func() {
				outcome := `{"outcome":"cancelled"}`
				if opt := c.onPermission(sid, callID); opt != "" {
					outcome = `{"outcome":"selected","optionId":` + strconv.Quote(opt) + `}`
				}
				_ = c.wire.send([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"outcome":` + outcome + `}}`))
			}()
		case method != "" && id != nil:
			_ = c.wire.send([]byte(`{"jsonrpc":"2.0","id":` + string(id.MarshalTo(nil)) + `,"error":{"code":-32601,"message":"Method not found"}}`))
		case id != nil:
			n, err := id.Uint64()
			if err != nil {
				continue
			}
			c.mu.Lock()
			ch := c.pending[n]
			delete(c.pending, n)
			if ch == nil && !c.gaveUp[n] {
				c.extra++
			}
			delete(c.gaveUp, n)
			c.mu.Unlock()
			if ch == nil {
				continue
			}
			var reply rpcReply
			if e := msg.Get("error"); e != nil && e.Type() == fastjson.TypeObject {
				reply.err = &rpcError{}
				_ = json.Unmarshal(e.MarshalTo(nil), reply.err)
			} else if res := msg.Get("result"); res != nil {
				reply.result = res.MarshalTo(nil)
			}
			ch <- reply
		}
	}
	c.mu.Lock()
	c.closed = fmt.Errorf("peer disconnected: %w", err)
	for id, ch := range c.pending {
		ch <- rpcReply{err: &rpcError{Code: -32603, Message: "peer disconnected before response"}}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// call sends a request whose params are already JSON and waits for its
// result.
func (c *rpc) call(ctx context.Context, method string, params []byte) (json.RawMessage, error) {
	ch := make(chan rpcReply, 1)
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return nil, c.closed
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	line := make([]byte, 0, len(params)+64)
	line = append(line, `{"jsonrpc":"2.0","id":`...)
	line = strconv.AppendUint(line, id, 10)
	line = append(line, `,"method":`...)
	line = strconv.AppendQuote(line, method)
	line = append(line, `,"params":`...)
	line = append(line, params...)
	line = append(line, '}')
	if err := c.wire.send(line); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return r.result, nil
	case <-ctx.Done():
		c.mu.Lock()
		if _, waiting := c.pending[id]; waiting {
			delete(c.pending, id)
			c.gaveUp[id] = true
		}
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// extraAnswers counts the responses to requests already answered or never
// sent.
func (c *rpc) extraAnswers() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.extra
}

// notify sends a notification.
func (c *rpc) notify(method string, params []byte) error {
	return c.wire.send([]byte(`{"jsonrpc":"2.0","method":` + strconv.Quote(method) + `,"params":` + string(params) + "}"))
}

// callJSON marshals params and decodes the result into out (if not nil).
func (c *rpc) callJSON(ctx context.Context, method string, params, out any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	res, err := c.call(ctx, method, b)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
	}
	return nil
}

// prompt sends a text prompt and returns the stop reason.
func (c *rpc) prompt(ctx context.Context, sessionID, text string) (string, error) {
	b := make([]byte, 0, 96+len(text))
	b = append(b, `{"sessionId":`...)
	b = strconv.AppendQuote(b, sessionID)
	b = append(b, `,"prompt":[{"type":"text","text":`...)
	b = strconv.AppendQuote(b, text) // the harness's prompts are ASCII
	b = append(b, "}]}"...)
	res, err := c.call(ctx, "session/prompt", b)
	if err != nil {
		return "", err
	}
	v, err := fastjson.ParseBytes(res)
	if err != nil || v.Type() != fastjson.TypeObject {
		return "", errors.New("session/prompt: bad response")
	}
	return string(v.GetStringBytes("stopReason")), nil
}
