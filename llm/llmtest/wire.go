package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

// chatRequest is the part of a chat completions request the server reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string  `json:"role"`
		Content   content `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
		Name       string `json:"name"`
	} `json:"messages"`
	Tools         []json.RawMessage `json:"tools"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// history converts the request's messages for Script.Answer.
func (r *chatRequest) history() []history.Message {
	msgs := make([]history.Message, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = history.Message{Role: history.Role(m.Role), Content: m.Content.text, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Content.images > 0 {
			// Only their number matters, to estimate the prompt.
			msgs[i].Images = make([]history.Image, m.Content.images)
		}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, history.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	return msgs
}

// content is a message's text, sent either as a string or as an array of
// parts, of which the text parts count, and the number of its image parts.
type content struct {
	text   string
	images int
}

func (c *content) UnmarshalJSON(data []byte) error {
	if json.Unmarshal(data, &c.text) == nil {
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(data, &parts); err != nil {
		return err
	}
	for _, p := range parts {
		c.text += p.Text
		if p.Type == "image_url" {
			c.images++
		}
	}
	return nil
}

// The wire shapes of answers.
type (
	chunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
		Usage   *usage        `json:"usage,omitempty"`
	}
	chunkChoice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	delta struct {
		Role             string          `json:"role,omitempty"`
		Content          string          `json:"content,omitempty"`
		ReasoningContent string          `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
	}
	toolCallDelta struct {
		Index    int           `json:"index"`
		ID       string        `json:"id,omitempty"`
		Type     string        `json:"type,omitempty"`
		Function functionDelta `json:"function"`
	}
	functionDelta struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	usage struct {
		PromptTokens            int `json:"prompt_tokens"`
		CompletionTokens        int `json:"completion_tokens"`
		TotalTokens             int `json:"total_tokens"`
		CompletionTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
)

func usageOf(u *llm.Usage) *usage {
	if u == nil {
		return nil
	}
	out := &usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	out.CompletionTokensDetails.ReasoningTokens = u.ThoughtTokens
	return out
}

// completion is the non-streaming answer.
func completion(req chatRequest, step llm.Step) map[string]any {
	msg := map[string]any{"role": "assistant", "content": step.Text}
	if step.Reasoning != "" {
		msg["reasoning_content"] = step.Reasoning
	}
	if len(step.ToolCalls) > 0 {
		calls := make([]map[string]any, len(step.ToolCalls))
		for i, tc := range step.ToolCalls {
			calls[i] = map[string]any{
				"id":       tc.ID,
				"type":     "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
			}
		}
		msg["tool_calls"] = calls
	}
	out := map[string]any{
		"id":      "chatcmpl-llmtest",
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   req.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": step.Finish}},
	}
	if u := usageOf(step.Usage); u != nil {
		out["usage"] = u
	}
	return out
}

// streamStep answers as server-sent events the way llama-server and vLLM do:
// a role chunk at once, then (after the scripted sleep) reasoning and text a
// word per chunk, each tool call as a header fragment and argument pieces, a
// finish chunk, a usage chunk if asked for, and [DONE]. A buffered server
// (SetBuffered) sends the reasoning, the text and each whole tool call in
// one chunk apiece instead. A stall step stops after the first word of its
// text until the client or the server goes; a truncate step stops after its
// text.
func (s *Server) streamStep(ctx context.Context, w http.ResponseWriter, req chatRequest, step llm.Step) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	e := &events{w: w, rc: http.NewResponseController(w), sent: &s.sent, base: chunk{
		ID:      "chatcmpl-llmtest",
		Object:  "chat.completion.chunk",
		Created: time.Now().Unix(),
		Model:   req.Model,
	}}
	if e.send(delta{Role: "assistant"}, nil, nil) != nil || llm.Pause(ctx, step.Sleep+step.Latency) != nil {
		return
	}
	if step.Stall {
		if word, _ := llm.NextWord(step.Text); word != "" && e.send(delta{Content: word}, nil, nil) != nil {
			return
		}
		<-ctx.Done()
		return
	}
	pace := step.WordGap()
	buffered := s.buffered.Load()
	for _, part := range []struct {
		text      string
		reasoning bool
	}{{step.Reasoning, true}, {step.Text, false}} {
		if buffered && part.text != "" {
			// The whole part at once, when its last word would have come.
			d := delta{Content: part.text}
			if part.reasoning {
				d = delta{ReasoningContent: part.text}
			}
			if llm.Pause(ctx, time.Duration(wordCount(part.text))*pace) != nil || e.send(d, nil, nil) != nil {
				return
			}
			continue
		}
		for rest := part.text; rest != ""; {
			var word string
			word, rest = llm.NextWord(rest)
			d := delta{Content: word}
			if part.reasoning {
				d = delta{ReasoningContent: word}
			}
			if llm.Pause(ctx, pace) != nil || e.send(d, nil, nil) != nil {
				return
			}
		}
	}
	if step.Truncate {
		// Ends the response cleanly, as a server that crashed behind a
		// proxy does: no finish chunk, no [DONE].
		return
	}
	for i, tc := range step.ToolCalls {
		head := toolCallDelta{Index: i, ID: tc.ID, Type: "function", Function: functionDelta{Name: tc.Name}}
		if buffered {
			head.Function.Arguments = tc.Arguments
			if e.send(delta{ToolCalls: []toolCallDelta{head}}, nil, nil) != nil {
				return
			}
			continue
		}
		if e.send(delta{ToolCalls: []toolCallDelta{head}}, nil, nil) != nil {
			return
		}
		for _, piece := range pieces(tc.Arguments) {
			frag := toolCallDelta{Index: i, Function: functionDelta{Arguments: piece}}
			if e.send(delta{ToolCalls: []toolCallDelta{frag}}, nil, nil) != nil {
				return
			}
		}
	}
	finish := step.Finish
	if e.send(delta{}, &finish, nil) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage && step.Usage != nil {
		if e.send(delta{}, nil, usageOf(step.Usage)) != nil {
			return
		}
	}
	e.write([]byte("data: [DONE]\n\n"))
}

// events writes the chunks of one stream, flushing each at once.
type events struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	sent *atomic.Int64
	base chunk
	buf  []byte
}

// send writes one chunk: a usage chunk (u set) has no choices, as OpenAI's.
func (e *events) send(d delta, finish *string, u *usage) error {
	c := e.base
	c.Choices = []chunkChoice{{Delta: d, FinishReason: finish}}
	if u != nil {
		c.Choices, c.Usage = []chunkChoice{}, u
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	e.buf = append(append(append(e.buf[:0], "data: "...), data...), "\n\n"...)
	return e.write(e.buf)
}

func (e *events) write(b []byte) error {
	if _, err := e.w.Write(b); err != nil {
		return err
	}
	if err := e.rc.Flush(); err != nil {
		return err
	}
	e.sent.Add(int64(len(b)))
	return nil
}

// pieces cuts tool-call arguments into at least two fragments, as real
// servers stream them, on character boundaries so each stays valid UTF-8.
func pieces(args string) []string {
	n := max(2, len(args)/16)
	var out []string
	for rest := args; rest != ""; {
		cut := min(len(rest), max(1, (len(args)+n-1)/n))
		for cut < len(rest) && !utf8.RuneStart(rest[cut]) {
			cut++
		}
		out = append(out, rest[:cut])
		rest = rest[cut:]
	}
	return out
}

// words is the number of streamed chunks of a step's reasoning and text.
func words(step llm.Step) int {
	return wordCount(step.Reasoning) + wordCount(step.Text)
}

// wordCount is the number of words llm.NextWord cuts text into.
func wordCount(text string) int {
	n := 0
	for rest := text; rest != ""; n++ {
		_, rest = llm.NextWord(rest)
	}
	return n
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": "server_error", "code": strconv.Itoa(status)},
	})
}

// badTool explains why a tool of the request is one no model server takes
// (its parameters are not a JSON object with type "object", or its
// properties are not an object), or returns "".
func badTool(tools []json.RawMessage) string {
	for _, raw := range tools {
		var t struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			return "invalid tool: " + string(raw)
		}
		if p := t.Function.Parameters; len(p) == 0 || string(p) == "null" {
			continue // a function without parameters
		}
		var schema struct {
			Type       any             `json:"type"`
			Properties json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(t.Function.Parameters, &schema); err != nil || schema.Type != "object" ||
			(schema.Properties != nil && (len(schema.Properties) == 0 || schema.Properties[0] != '{')) {
			return fmt.Sprintf("invalid schema for function %q: parameters must be a JSON schema of type object, got %s", t.Function.Name, t.Function.Parameters)
		}
	}
	return ""
}
