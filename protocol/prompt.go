package protocol

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/actors"
)

// session/prompt is the one request mm serves at volume, and the SDK's way
// of serving it cost a third of the CPU under load: a fresh goroutine per
// request whose stack grows in decoding, and content blocks decoded twice
// each (into a map, then into their variant). The line filter hands prompts
// here instead: the filter's goroutine decodes them, text and resource_link
// blocks in one pass (any other block takes the SDK's decoder); the handler
// runs on a goroutine kept from an earlier prompt; and the response is
// written like the SDK writes it. Everything else still goes through the SDK.

// promptJob is a session/prompt taken off the wire, decoded, by the line
// filter; err is set when its params are invalid.
type promptJob struct {
	id        json.RawMessage
	sessionID acp.SessionId
	blocks    []acp.ContentBlock
	seq       uint64
	err       *acp.RequestError
}

// leanPrompt is the common shape of a prompt's params.
type leanPrompt struct {
	SessionID string `json:"sessionId"`
	Prompt    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		URI  string `json:"uri"`
		Name string `json:"name"`
	} `json:"prompt"`
}

// decodePrompt decodes params as the SDK would, reporting errors as the
// SDK's invalid params.
func decodePrompt(params []byte) (acp.SessionId, []acp.ContentBlock, *acp.RequestError) {
	var p leanPrompt
	if err := json.Unmarshal(params, &p); err != nil {
		return "", nil, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return p.decode(func() (acp.PromptRequest, error) {
		var full acp.PromptRequest
		err := json.Unmarshal(params, &full)
		return full, err
	})
}

// decode turns lean params into content blocks; a block of another type
// than text or resource_link makes it decode the whole prompt with the
// SDK's types instead (full).
func (p *leanPrompt) decode(full func() (acp.PromptRequest, error)) (acp.SessionId, []acp.ContentBlock, *acp.RequestError) {
	if p.Prompt == nil {
		return "", nil, acp.NewInvalidParams(map[string]any{"error": "prompt is required"})
	}
	blocks := make([]acp.ContentBlock, 0, len(p.Prompt))
	for _, b := range p.Prompt {
		switch b.Type {
		case "text":
			blocks = append(blocks, acp.TextBlock(b.Text))
		case "resource_link":
			blocks = append(blocks, acp.ResourceLinkBlock(b.Name, b.URI))
		default:
			r, err := full()
			if err != nil {
				return "", nil, acp.NewInvalidParams(map[string]any{"error": err.Error()})
			}
			return r.SessionId, r.Prompt, nil
		}
	}
	return acp.SessionId(p.SessionID), blocks, nil
}

// servePrompt starts one prompt's turn; the session answers it through
// the outbox (appendTurnResult), so no goroutine waits for the turn. A
// panic becomes an internal error for this prompt only.
func (a *Agent) servePrompt(job promptJob) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error(fmt.Sprintf("[acp] session/prompt panicked: %v", r))
			writeResponse(a.out, job.id, nil, acp.NewInternalError(map[string]any{"error": fmt.Sprintf("mm failed: %v", r)}))
		}
	}()
	if job.err != nil {
		writeResponse(a.out, job.id, nil, job.err)
		return
	}
	s, err := a.session(job.sessionID)
	if err != nil {
		writeResponse(a.out, job.id, nil, toRequestError(err))
		return
	}
	text := flatten(job.blocks, s.Cwd, func(path string) {
		a.log.Info(fmt.Sprintf("[acp] session %s: attached %s", s.ID, path))
	})
	s.Start(job.seq, text, &actors.Reply{ID: job.id})
}

// needsIO says whether starting the prompt touches the file system (an
// @mention is looked up), which the line filter's goroutine must not wait
// for.
func (job *promptJob) needsIO() bool {
	for _, b := range job.blocks {
		if b.Text == nil || strings.Contains(b.Text.Text, "@") {
			return true
		}
	}
	return false
}

// appendTurnResult encodes a turn's result as its prompt's response.
func appendTurnResult(b []byte, id json.RawMessage, res *actors.TurnResult) []byte {
	if res.Err != "" {
		return appendResponse(b, id, nil, acp.NewInternalError(map[string]any{"error": res.Err}))
	}
	r := acp.PromptResponse{StopReason: res.StopReason, Usage: res.Usage}
	if res.Provenance.SessionID != "" {
		r.Meta = provenanceMeta(res.Provenance) // /new and /compact change it
		return appendResponse(b, id, r, nil)
	}
	return appendPromptResult(b, id, &r)
}

// appendPromptResult encodes the common prompt response (a stop reason and
// the usage totals) without reflection.
func appendPromptResult(b []byte, id json.RawMessage, r *acp.PromptResponse) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":{"stopReason":`...)
	b = appendString(b, string(r.StopReason))
	if u := r.Usage; u != nil {
		b = append(b, `,"usage":{`...)
		if u.CachedReadTokens != nil {
			b = append(b, `"cachedReadTokens":`...)
			b = strconv.AppendInt(b, int64(*u.CachedReadTokens), 10)
			b = append(b, ',')
		}
		if u.CachedWriteTokens != nil {
			b = append(b, `"cachedWriteTokens":`...)
			b = strconv.AppendInt(b, int64(*u.CachedWriteTokens), 10)
			b = append(b, ',')
		}
		b = append(b, `"inputTokens":`...)
		b = strconv.AppendInt(b, int64(u.InputTokens), 10)
		b = append(b, `,"outputTokens":`...)
		b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
		if u.ThoughtTokens != nil {
			b = append(b, `,"thoughtTokens":`...)
			b = strconv.AppendInt(b, int64(*u.ThoughtTokens), 10)
		}
		b = append(b, `,"totalTokens":`...)
		b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
		b = append(b, '}')
	}
	return append(b, "}}\n"...)
}

// writeResponse writes a JSON-RPC response as the SDK does.
func writeResponse(w io.Writer, id json.RawMessage, result any, rerr *acp.RequestError) {
	_, _ = w.Write(appendResponse(nil, id, result, rerr))
}

// appendResponse encodes a JSON-RPC response line as the SDK does.
func appendResponse(buf []byte, id json.RawMessage, result any, rerr *acp.RequestError) []byte {
	msg := struct {
		JSONRPC string            `json:"jsonrpc"`
		ID      json.RawMessage   `json:"id"`
		Result  any               `json:"result,omitempty"`
		Error   *acp.RequestError `json:"error,omitempty"`
	}{"2.0", id, result, rerr}
	b, err := json.Marshal(msg)
	if err != nil {
		b, _ = json.Marshal(struct {
			JSONRPC string            `json:"jsonrpc"`
			ID      json.RawMessage   `json:"id"`
			Error   *acp.RequestError `json:"error"`
		}{"2.0", id, acp.NewInternalError(map[string]any{"error": err.Error()})})
	}
	buf = append(buf, b...)
	return append(buf, '\n')
}

func toRequestError(err error) *acp.RequestError {
	if re, ok := err.(*acp.RequestError); ok {
		return re
	}
	return acp.NewInternalError(map[string]any{"error": err.Error()})
}
