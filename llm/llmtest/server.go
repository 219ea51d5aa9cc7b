package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

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
	// buffered is set by SetBuffered.
	buffered atomic.Bool

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

// SetBuffered makes the server stream, from its next answer on, as one
// that buffers: each answer's reasoning, its text, and each tool call (id,
// name and whole arguments) in one event apiece, however long, as vLLM
// does with a tool parser and as some proxies do with whatever they relay.
// Each event comes when its last word would have at the step's token rate.
func (s *Server) SetBuffered(on bool) { s.buffered.Store(on) }

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
	if msg := badTool(req.Tools); msg != "" {
		// As the model servers do: llama.cpp and OpenAI refuse a function
		// whose parameters are not an object schema.
		writeError(w, http.StatusBadRequest, msg)
		return
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
