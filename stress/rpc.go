package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/jsonrpc"
)

// rpc is the harness's client side of one connection to mm, on mm's own
// jsonrpc.Conn: its one read loop, its one table of the calls waiting for
// their answers, its checks of every message, its error answers. The SDK's
// client decodes every message several times and queues at most 1,024
// notifications before it drops the connection: under a thousand busy
// sessions it became the bottleneck of the measure, and then broke it. The
// Conn splits each message once; the harness's handler reads only the
// members the checks need, and hands every notification to its session's
// tracker in arrival order, on the read loop.
type rpc struct {
	conn *jsonrpc.Conn
	t    transport
	// done is closed once the read loop has ended; err is why (nil at the
	// stream's end), read after done.
	done chan struct{}
	err  error
	// extra counts the responses to a request that was already answered,
	// or never sent: every request must be answered exactly once.
	extra atomic.Int64

	onUpdate     func(sessionID string, u *update)
	onPermission func(sessionID, callID string) (optionID string)
}

// rpcError is mm's error answer to a call of the harness's, said as the
// report groups errors: its message, and the reason in its data when the
// message does not say it already (mm's own failures carry their reason
// in both).
type rpcError jsonrpc.Error

func (e *rpcError) Error() string {
	s := e.Message
	if d, ok := e.Data.(map[string]any); ok {
		if why, _ := d["error"].(string); why != "" && why != s {
			s += ": " + why
		}
	}
	return s
}

// errDisconnected is a call's end when mm's side ends before it answers.
var errDisconnected = errors.New("peer disconnected before response")

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

// maxPeerRequests bounds mm's requests to the harness not answered yet
// (permission requests): far above what a run asks at once, so that the
// read loop never waits for a place.
const maxPeerRequests = 1 << 16

// newRPC starts the client on t; its read loop runs until t's stream
// ends. onUpdate gets every session/update, in the order read (and
// "unreadable" ones, for no session); onPermission chooses the option of a
// permission request ("": cancelled). Either may be nil.
func newRPC(t transport, onUpdate func(string, *update), onPermission func(string, string) string) *rpc {
	c := &rpc{t: t, done: make(chan struct{}), onUpdate: onUpdate, onPermission: onPermission}
	c.conn = jsonrpc.New(&inbound{src: t.src, c: c}, t.w, jsonrpc.Options{Handler: c, Max: maxPeerRequests,
		MaxLine: maxMessage, LimitName: "the harness's limit"})
	go func() {
		c.err = c.conn.Run()
		close(c.done)
	}()
	return c
}

// close ends the sending side after what is queued is written.
func (c *rpc) close() error { return c.t.close() }

// inbound is the Source of the harness's Conn: the transport's, watched
// for what the Conn answers or drops without its handler. A response to no
// call waiting (a second answer, or one to a request never sent) is
// counted; a message that is no JSON-RPC message (strictly: the Conn
// answers it with a parse error) counts against the run when it names
// session/update, never dropped silently; a line longer than maxMessage
// ends the run: mm never writes one. Its Next is called by the read loop
// only, so that a call answered is no longer awaited when the next
// message is looked at.
type inbound struct {
	src jsonrpc.Source
	c   *rpc
}

func (in *inbound) Next() (jsonrpc.Message, error) {
	m, err := in.src.Next()
	switch {
	case m.TooLong > 0:
		return jsonrpc.Message{}, fmt.Errorf("mm wrote a line of %d bytes, over the harness's %d", m.TooLong, maxMessage)
	case m.Err != nil:
		if in.c.onUpdate != nil && bytes.Contains(m.Line, []byte(`"session/update"`)) {
			in.c.onUpdate("", &update{Kind: "unreadable"})
		}
	case m.Method == nil && m.ID != nil && (m.Result != nil || m.Error != nil):
		if id, ok := jsonrpc.IDOf(m.ID); ok && !in.c.conn.Awaits(id) {
			in.c.extra.Add(1)
		}
	}
	return m, err
}

// Serve handles mm's requests and notifications, on the read loop, in the
// order read: a session/update goes to its session's tracker; a
// permission request is decided there (it belongs to the turn the updates
// before it opened) and answered; any other request is answered "Method
// not found". The answers are written apart from the read loop, which
// never waits on mm.
func (c *rpc) Serve(r *jsonrpc.Request) {
	switch {
	case r.Method == "session/update" && !r.IsCall():
		if c.onUpdate != nil {
			u := readUpdate(r.Params)
			c.onUpdate(r.Session, &u)
		}
	case r.Method == "session/request_permission" && r.IsCall():
		var opt string
		if c.onPermission != nil {
			opt = c.onPermission(r.Session, gjson.Get(inPlace(r.Params), "toolCall.toolCallId").Str)
		}
		res := acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}
		if opt != "" {
			res.Outcome = acp.NewRequestPermissionOutcomeSelected(acp.PermissionOptionId(opt))
		}
		go c.conn.Respond(r.ID, res, nil)
	case r.IsCall():
		go c.conn.Respond(r.ID, nil, jsonrpc.ErrMethodNotFound.Data(map[string]any{"method": r.Method}))
	}
}

// readUpdate reads the members of params.update the checks use; a member
// of another type than the checks expect is read as absent. It reads
// params in place: the strings it returns share the message's bytes, which
// the read loop never reuses (a line is read into a buffer of its own).
func readUpdate(params json.RawMessage) update {
	var u update
	gjson.Get(inPlace(params), "update").ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "sessionUpdate":
			u.Kind = v.Str
		case "toolCallId":
			u.ToolCallID = v.Str
		case "status":
			u.Status = v.Str
		case "content":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "type":
					u.Content.Type = v.Str
				case "text":
					u.Content.Text = v.Str
				}
				return true
			})
		}
		return true
	})
	return u
}

// inPlace is b as a string, without a copy: b must not change while the
// string is in use.
func inPlace(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// call sends a request and waits for its result. A call whose ctx ends
// stays registered (Await): its late answer is not taken for an extra
// one.
func (c *rpc) call(ctx context.Context, method string, params any, session string) (json.RawMessage, error) {
	select {
	case <-c.done:
		err := c.err
		if err == nil {
			err = io.EOF
		}
		return nil, fmt.Errorf("peer disconnected: %w", err)
	default:
	}
	id, answer := c.conn.Await("")
	var data []byte
	if p, ok := params.(appended); ok {
		data = jsonrpc.AppendRequest(make([]byte, 0, len(p)+len(method)+48), id, method, p, true)
	} else {
		var err error
		data, err = jsonrpc.EncodeRequest(id, method, params)
		if err != nil {
			return nil, err // never sent: the call waits for nothing until the end
		}
	}
	if err := c.conn.Write(jsonrpc.Out{Data: data, ID: id, Session: session}); err != nil {
		return nil, err
	}
	select {
	case r, ok := <-answer:
		switch {
		case !ok:
			return nil, errDisconnected
		case r.Error != nil:
			return nil, (*rpcError)(r.Error)
		}
		return r.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// extraAnswers counts the responses to requests already answered or never
// sent.
func (c *rpc) extraAnswers() int64 { return c.extra.Load() }

// cancel sends session/cancel for a session.
func (c *rpc) cancel(sessionID string) error {
	return c.conn.Notify("session/cancel", acp.CancelNotification{SessionId: acp.SessionId(sessionID)}, sessionID)
}

// callJSON sends params and decodes the result into out (if not nil).
func (c *rpc) callJSON(ctx context.Context, method string, params, out any) error {
	res, err := c.call(ctx, method, params, "")
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

// promptParams is a text prompt's params, as the SDK writes them.
type promptParams struct {
	SessionID string       `json:"sessionId"`
	Prompt    [1]textBlock `json:"prompt"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func textPrompt(sessionID, text string) *promptParams {
	return &promptParams{SessionID: sessionID, Prompt: [1]textBlock{{Type: "text", Text: text}}}
}

// appended are params the harness appended itself, compact and valid:
// its request is appended too (jsonrpc.AppendRequest), not checked again.
type appended []byte

// promptBytes are textPrompt's bytes, appended: the harness's one call
// per turn.
func promptBytes(sessionID, text string) appended {
	b := make([]byte, 0, 64+len(sessionID)+len(text))
	b = append(b, `{"sessionId":`...)
	b = jsonrpc.AppendString(b, sessionID)
	b = append(b, `,"prompt":[{"type":"text","text":`...)
	b = jsonrpc.AppendString(b, text)
	return append(b, "}]}"...)
}

// prompt sends a text prompt and returns the stop reason.
func (c *rpc) prompt(ctx context.Context, sessionID, text string) (string, error) {
	res, err := c.call(ctx, "session/prompt", promptBytes(sessionID, text), sessionID)
	if err != nil {
		return "", err
	}
	if len(res) == 0 || res[0] != '{' {
		return "", errors.New("session/prompt: bad response")
	}
	return gjson.Get(inPlace(res), "stopReason").Str, nil
}
