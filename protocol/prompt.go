package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/coder/acp-go-sdk"
	"github.com/tidwall/gjson"
)

// A prompt's request: its params decoded in one pass where the client's
// connection is. What $/cancel_request needs of it is its id: the session
// finds the prompt among its turns (actors.Session.CancelRequest).

// decodePrompt is session/prompt's decode, the hot path (promptRequest).
func decodePrompt(raw json.RawMessage) (any, *acp.RequestError) {
	if r, ok := fastPrompt(raw); ok {
		return r, nil
	}
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

// fastPrompt reads the params nearly every prompt has, in one walk:
// {"sessionId":…,"prompt":[…]} and nothing else, each named once and so,
// the session's id with no escape and valid UTF-8, every block one that
// plainText reads. Anything else is left to encoding/json (false), whose
// reading could differ: a name in other case, a member twice, another
// member, an escape. raw is valid JSON: the connection checked the whole
// line (jsonrpc.Parse). TestFastPromptIsDecode holds it to the slow path.
func fastPrompt(raw []byte) (acp.PromptRequest, bool) {
	var r acp.PromptRequest
	v := gjson.Parse(unsafe.String(unsafe.SliceData(raw), len(raw)))
	if !v.IsObject() {
		return r, false
	}
	ok, session, prompt := true, false, false
	v.ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Raw == `"sessionId"` && !session && v.Type == gjson.String && strings.IndexByte(v.Raw, '\\') < 0 && utf8.ValidString(v.Raw):
			session = true
			r.SessionId = acp.SessionId(strings.Clone(v.Str))
		case k.Raw == `"prompt"` && !prompt && v.IsArray():
			prompt = true
			r.Prompt = make([]acp.ContentBlock, 0, 1)
			v.ForEach(func(_, b gjson.Result) bool {
				text, plain := plainText(unsafe.Slice(unsafe.StringData(b.Raw), len(b.Raw)))
				if !plain || !b.IsObject() {
					ok = false
					return false
				}
				r.Prompt = append(r.Prompt, acp.ContentBlock{Text: &acp.ContentBlockText{Type: "text", Text: text}})
				return true
			})
		default:
			ok = false
		}
		return ok
	})
	return r, ok && session && prompt
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

// FastPrompt is fastPrompt for params read from elsewhere (another
// node's call), which it checks are JSON first; false leaves them to
// encoding/json.
func FastPrompt(raw []byte) (acp.PromptRequest, bool) {
	if !json.Valid(raw) {
		return acp.PromptRequest{}, false
	}
	return fastPrompt(raw)
}
