package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mm-agent/mm/llm"
)

// defaultContextWindow is what GET /props reports until SetContextWindow.
const defaultContextWindow = 8192

// Server is an OpenAI-compatible chat completions server that plays a script.
// It is safe for concurrent use.
type Server struct {
	script *llm.Script
	srv    *httptest.Server
	// closing ends every handler's waits, so that Close does not sit out a
	// scripted sleep of a request whose client is still connected.
	closing context.Context
	stop    context.CancelFunc

	requests atomic.Int64
	conns    atomic.Int64
	nCtx     atomic.Int64
	// enforce is set by SetContextWindow: only then are prompts larger
	// than nCtx refused, so that tests that never set a window are not.
	enforce   atomic.Bool
	oversized atomic.Int64
	maxPrompt atomic.Int64
	// sent counts the bytes of streamed answers written to clients.
	sent atomic.Int64

	mu   sync.Mutex
	last []byte // body of the last chat request
	// fail is what FailNext asked for: how many chat requests are still
	// to refuse, with which status and Retry-After.
	fail struct {
		n          int
		status     int
		retryAfter string
	}
}

// NewServer starts a server on 127.0.0.1 that answers with script, or with
// llm.DefaultScript when script is nil.
func NewServer(script *llm.Script) *Server {
	if script == nil {
		script = llm.DefaultScript()
	}
	s := &Server{script: script}
	s.closing, s.stop = context.WithCancel(context.Background())
	s.nCtx.Store(defaultContextWindow)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /props", s.props)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	return s
}

// URL is the API root to configure a client with; it ends in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close stops the server, cutting scripted sleeps short.
func (s *Server) Close() {
	s.stop()
	s.srv.Close()
}

// Requests is the number of chat requests received so far.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// LastRequest is the body of the last chat request, decoded; nil before any.
func (s *Server) LastRequest() map[string]any {
	s.mu.Lock()
	body := s.last
	s.mu.Unlock()
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	return req
}

// BytesSent is the number of bytes of streamed answers the server has
// written so far (what the client's socket accepted).
func (s *Server) BytesSent() int64 { return s.sent.Load() }

// SetContextWindow sets the n_ctx that GET /props reports, and from then
// on refuses, as llama-server does, a chat request whose estimated prompt
// (llm.EstimateTokens of its messages, plus a token per four bytes of its
// tool definitions) exceeds it: HTTP 400, "the request exceeds the
// available context size".
func (s *Server) SetContextWindow(n int) {
	s.nCtx.Store(int64(n))
	s.enforce.Store(true)
}

// Oversized is how many chat requests were refused for exceeding the
// context window.
func (s *Server) Oversized() int { return int(s.oversized.Load()) }

// MaxPromptTokens is the largest estimated prompt of the chat requests
// received so far, refused ones included.
func (s *Server) MaxPromptTokens() int { return int(s.maxPrompt.Load()) }

// Connections is the number of TCP connections the server has accepted.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// FailNext makes the next n chat requests fail with HTTP status and an
// OpenAI error body (message "busy"), with a Retry-After header when
// retryAfter is not empty. They count as requests.
func (s *Server) FailNext(n int, status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.n, s.fail.status, s.fail.retryAfter = n, status, retryAfter
}

// takeFailure consumes one of the failures FailNext asked for.
func (s *Server) takeFailure() (status int, retryAfter string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail.n <= 0 {
		return 0, "", false
	}
	s.fail.n--
	return s.fail.status, s.fail.retryAfter, true
}

// notePrompt keeps the largest prompt seen.
func (s *Server) notePrompt(tokens int) {
	for {
		seen := s.maxPrompt.Load()
		if int64(tokens) <= seen || s.maxPrompt.CompareAndSwap(seen, int64(tokens)) {
			return
		}
	}
}

func (s *Server) props(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": s.nCtx.Load()},
	})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []map[string]any{{"id": modelName, "object": "model", "owned_by": "llmtest"}},
	})
}

// modelName is the model the server claims to be when a request names none.
const modelName = "scripted"

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	s.requests.Add(1)
	s.mu.Lock()
	s.last = body
	s.mu.Unlock()
	if status, retryAfter, ok := s.takeFailure(); ok {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeError(w, status, "busy")
		return
	}

	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if req.Model == "" {
		req.Model = modelName
	}
	history := req.history()
	prompt := llm.EstimateTokens(history)
	for _, tool := range req.Tools {
		prompt += (len(tool) + 3) / 4
	}
	s.notePrompt(prompt)
	if nCtx := int(s.nCtx.Load()); s.enforce.Load() && prompt > nCtx {
		s.oversized.Add(1)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"code":            http.StatusBadRequest,
			"message":         fmt.Sprintf("the request exceeds the available context size (%d tokens, n_ctx %d)", prompt, nCtx),
			"type":            "exceed_context_size_error",
			"n_prompt_tokens": prompt,
			"n_ctx":           nCtx,
		}})
		return
	}
	step := s.script.Answer(history)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()

	if !req.Stream || step.Error != "" || step.Garbage {
		if llm.Pause(ctx, step.Sleep+step.Latency+time.Duration(words(step))*step.WordGap()) != nil {
			return
		}
		switch {
		case step.Error != "":
			writeError(w, http.StatusInternalServerError, step.Error)
		case step.Garbage:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {not json\n\n")
		case step.Stall:
			<-ctx.Done()
		case step.Truncate:
			data, _ := json.Marshal(completion(req, step))
			w.Header().Set("Content-Type", "application/json")
			w.Write(data[:len(data)/2])
		default:
			writeJSON(w, http.StatusOK, completion(req, step))
		}
		return
	}
	s.streamStep(ctx, w, req, step)
}

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
func (r *chatRequest) history() []llm.Message {
	msgs := make([]llm.Message, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = llm.Message{Role: llm.Role(m.Role), Content: m.Content.text, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Content.images > 0 {
			// Only their number matters, to estimate the prompt.
			msgs[i].Images = make([]llm.Image, m.Content.images)
		}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
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
// finish chunk, a usage chunk if asked for, and [DONE]. A stall step stops
// after the first word of its text until the client or the server goes; a
// truncate step stops after its text.
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
	for _, part := range []struct {
		text      string
		reasoning bool
	}{{step.Reasoning, true}, {step.Text, false}} {
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
	n := 0
	for _, text := range []string{step.Reasoning, step.Text} {
		for rest := text; rest != ""; n++ {
			_, rest = llm.NextWord(rest)
		}
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
