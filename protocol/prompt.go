package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"

	"github.com/mm-agent/mm/actors"
	"github.com/mm-agent/mm/jsonrpc"
)

// A prompt's request: its params decoded in one pass where the client's
// connection is, and what $/cancel_request needs of it (its session and
// its number there) kept while it is in flight: on the client's node, with
// the request in the connection's table (jsonrpc.Conn.Annotate); on the
// node of a cluster where its session runs, by the link's prompts.

// promptNotes keep what $/cancel_request needs of the prompts in flight.
type promptNotes interface {
	// started notes that prompt r runs as number seq of session s; it
	// reports whether its $/cancel_request came first.
	started(r actors.Reply, s *actors.Session, seq uint64) (cancelled bool)
	// cancel cancels the prompt of request id, if it is one in flight.
	cancel(id jsonrpc.ID)
	// answered forgets r once it is answered.
	answered(r actors.Reply)
}

// promptNote is what is kept of a prompt in flight.
type promptNote struct {
	session *actors.Session
	seq     uint64
}

// rpcNotes keep them with the requests in the connection's table: gone
// with the request once it is answered.
type rpcNotes struct{ rpc *jsonrpc.Conn }

func (n rpcNotes) started(r actors.Reply, s *actors.Session, seq uint64) bool {
	n.rpc.Annotate(r.ID, r.Seq, promptNote{session: s, seq: seq})
	return false // the connection reads in order: a cancel comes after
}

func (n rpcNotes) cancel(id jsonrpc.ID) {
	in, ok := n.rpc.Lookup(id)
	if p, isPrompt := in.Note.(promptNote); ok && isPrompt {
		p.session.CancelPrompt(p.seq)
	}
}

func (rpcNotes) answered(actors.Reply) {}

// prompts are a remote client's prompt requests served here and not yet
// answered, by id: its connection, and its table, are on its own node.
type prompts struct {
	mu sync.Mutex
	m  map[jsonrpc.ID]*promptRef
}

// promptRef is a prompt request: its session and number once started, or
// cancelled, when its $/cancel_request came before it started.
type promptRef struct {
	session   *actors.Session
	seq       uint64
	reply     actors.Reply
	cancelled bool
}

func (ps *prompts) started(r actors.Reply, s *actors.Session, seq uint64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[jsonrpc.ID]*promptRef{}
	}
	ref, ok := ps.m[r.ID]
	if !ok || ref.reply.Seq != r.Seq && !ref.cancelled {
		ref = &promptRef{reply: r}
		ps.m[r.ID] = ref
	}
	ref.reply, ref.session, ref.seq = r, s, seq
	return ref.cancelled
}

func (ps *prompts) answered(r actors.Reply) {
	if r.Method != acp.AgentMethodSessionPrompt || r.ID.IsZero() {
		return
	}
	ps.mu.Lock()
	if ref, ok := ps.m[r.ID]; ok && ref.reply.Seq == r.Seq {
		delete(ps.m, r.ID)
	}
	ps.mu.Unlock()
}

func (ps *prompts) cancel(id jsonrpc.ID) {
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = map[jsonrpc.ID]*promptRef{}
	}
	ref, ok := ps.m[id]
	if !ok {
		// Its request is on its way: it starts cancelled.
		ref = &promptRef{reply: actors.Reply{ID: id}}
		ps.m[id] = ref
	}
	if ref.session == nil {
		ref.cancelled = true
	}
	ps.mu.Unlock()
	if ref.session != nil {
		ref.session.CancelPrompt(ref.seq)
	}
}

// decodePrompt is session/prompt's decode, the hot path (promptRequest).
func decodePrompt(raw json.RawMessage) (any, *acp.RequestError) {
	var p promptRequest
	if rerr := decodeParams(raw, &p); rerr != nil {
		return nil, rerr
	}
	return p.request(), nil
}

// promptRequest decodes session/prompt params into the SDK's types in one
// pass for text blocks, the blocks editors send most: acp.ContentBlock's
// own decoder reads each block into a map, then again into its variant,
// which cost a tenth of mm's CPU under load (mmstress over pipes); a block
// of any other type takes it.
type promptRequest struct {
	Meta      map[string]any `json:"_meta,omitempty"`
	MessageId *string        `json:"messageId,omitempty"`
	Prompt    []promptBlock  `json:"prompt"`
	SessionId acp.SessionId  `json:"sessionId"`
}

type promptBlock struct{ acp.ContentBlock }

func (b *promptBlock) UnmarshalJSON(data []byte) error {
	if text, ok := plainText(data); ok {
		b.Text = &acp.ContentBlockText{Type: "text", Text: text}
		return nil
	}
	var t acp.ContentBlockText
	if json.Unmarshal(data, &t) == nil && t.Type == "text" {
		b.Text = &t
		return nil
	}
	return b.ContentBlock.UnmarshalJSON(data)
}

// plainText reads a block that is {"type":"text","text":…} and nothing
// else, its text valid UTF-8 with no \u escape, in one walk: what nearly
// every prompt is. Anything else (other members, a name spelled another
// way or twice, a \u escape, invalid UTF-8, where encoding/json's reading
// could differ) is left to json.Unmarshal. data is valid JSON: the
// decoder checked the whole line before it called UnmarshalJSON. data is
// read in place and the text copied once (issue 42: what decoding a
// message allocates is counted against mm serve's room; a copy of the
// whole block first doubled it).
func plainText(data []byte) (string, bool) {
	if bytes.Contains(data, []byte(`\u`)) {
		return "", false
	}
	var typ, text gjson.Result
	plain := true
	gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data))).ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Raw == `"type"` && !typ.Exists():
			typ = v
		case k.Raw == `"text"` && !text.Exists():
			text = v
		default:
			plain = false
		}
		return plain
	})
	if !plain || typ.Raw != `"text"` || text.Type != gjson.String || !utf8.ValidString(text.Raw) {
		return "", false
	}
	if strings.IndexByte(text.Raw, '\\') < 0 {
		return strings.Clone(text.Str), true // a slice of data: copied
	}
	return text.Str, true // unescaped: gjson's own
}

func (p *promptRequest) request() acp.PromptRequest {
	r := acp.PromptRequest{Meta: p.Meta, MessageId: p.MessageId, SessionId: p.SessionId, Prompt: make([]acp.ContentBlock, len(p.Prompt))}
	for i := range p.Prompt {
		r.Prompt[i] = p.Prompt[i].ContentBlock
	}
	return r
}

// Validate is the SDK's PromptRequest.Validate.
func (p *promptRequest) Validate() error {
	if p.Prompt == nil {
		return errors.New("prompt is required")
	}
	return nil
}
