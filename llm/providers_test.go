package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

// recorder is a fake server that answers every request with one handler
// and keeps the last request body.
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	body   map[string]any
	header http.Header
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.body, rec.header = nil, r.Header.Clone()
		json.Unmarshal(data, &rec.body)
		rec.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) last() (map[string]any, http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body, r.header
}

// flushLines writes lines one at a time, as a streaming server does.
func flushLines(w http.ResponseWriter, contentType string, lines ...string) {
	w.Header().Set("Content-Type", contentType)
	for _, l := range lines {
		fmt.Fprintln(w, l)
		w.(http.Flusher).Flush()
	}
}

var toolTurn = []history.Message{
	{Role: history.RoleSystem, Content: "sys"},
	{Role: history.RoleUser, Content: "list files"},
	{Role: history.RoleAssistant, Content: "Listing.", ToolCalls: []history.ToolCall{
		{ID: "c1", Name: "bash", Arguments: `{"command":"ls"}`},
		{ID: "c2", Name: "pwd"},
	}},
	{Role: history.RoleTool, ToolCallID: "c1", Name: "bash", Content: "a.txt"},
	{Role: history.RoleTool, ToolCallID: "c2", Name: "pwd", Content: "/tmp"},
}

func TestOllamaStreams(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/chat" {
			http.NotFound(w, r)
			return
		}
		flushLines(w, "application/x-ndjson",
			`{"model":"m","message":{"role":"assistant","content":"Two "},"done":false}`,
			`{"model":"m","message":{"role":"assistant","content":"files."},"done":false}`,
			`{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":30,"eval_count":3}`,
		)
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL + "/v1", Name: "qwen3", Temperature: -1, MaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	got := stream(t.Context(), m, llm.Request{Messages: toolTurn, Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.text != "Two files." || got.resp.Text != got.text || got.resp.FinishReason != llm.FinishStop {
		t.Errorf("deltas %q, response %+v", got.text, got.resp)
	}
	if u := got.resp.Usage; u == nil || *u != (llm.Usage{InputTokens: 30, OutputTokens: 3}) {
		t.Errorf("usage %+v, want 30 in, 3 out", u)
	}

	sent, _ := srv.last()
	opts := sent["options"].(map[string]any)
	if _, ok := opts["temperature"]; ok || opts["num_predict"] != float64(64) || sent["model"] != "qwen3" {
		t.Errorf("sent model %v, options %v: want qwen3, no temperature, num_predict 64", sent["model"], opts)
	}
	var roles []string
	for _, msg := range sent["messages"].([]any) {
		roles = append(roles, msg.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,tool" {
		t.Errorf("roles sent %v", roles)
	}
	assistant := sent["messages"].([]any)[2].(map[string]any)["content"].(string)
	if !strings.Contains(assistant, `[called tool bash with {"command":"ls"}]`) {
		t.Errorf("past tool calls must reach the model as text, sent %q", assistant)
	}
}

func TestOllamaErrors(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"model \"nope\" not found, try pulling it first"}`)
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL, Name: "nope", Temperature: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("hi"), Temperature: -1}).err,
		`model server: HTTP 404: model "nope" not found`)

	url := strings.TrimSuffix(closedPortURL(t), "/v1")
	m, err = llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: url, Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("hi")}).err, "connection refused ("+url+")")

	if _, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: "::not a url"}); err == nil {
		t.Error("a malformed Ollama URL must fail New, not exit the process")
	}
}

// anthropicStream is a Messages API stream: thinking, text, one tool use.
var anthropicStream = []string{
	`event: message_start`,
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":40,"output_tokens":1}}}`,
	``,
	`event: ping`,
	`data: {"type":"ping"}`,
	``,
	`data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Need "}}`,
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"ls."}}`,
	`data: {"type":"content_block_stop","index":0}`,
	`data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	`data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}`,
	`data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"look."}}`,
	`data: {"type":"content_block_stop","index":1}`,
	`data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}}`,
	`data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\":"}}`,
	`data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}`,
	`data: {"type":"content_block_stop","index":2}`,
	`data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":25}}`,
	`data: {"type":"message_stop"}`,
	``,
}

func TestAnthropicStreams(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		flushLines(w, "text/event-stream", anthropicStream...)
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: srv.URL + "/v1", Name: "claude-test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := stream(t.Context(), m, llm.Request{Messages: toolTurn, Temperature: -1, Tools: []llm.ToolDef{{Name: "bash", Description: "Run."}}})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.reasoning != "Need ls." || got.resp.Reasoning != got.reasoning {
		t.Errorf("reasoning deltas %q, response %q", got.reasoning, got.resp.Reasoning)
	}
	if got.text != "Let me look." || got.resp.Text != got.text {
		t.Errorf("text deltas %q, response %q", got.text, got.resp.Text)
	}
	want := []history.ToolCall{{ID: "toolu_1", Name: "bash", Arguments: `{"command":"ls"}`}}
	if !reflect.DeepEqual(got.resp.ToolCalls, want) || got.resp.FinishReason != llm.FinishToolCalls {
		t.Errorf("tool calls %+v (%s), want %+v", got.resp.ToolCalls, got.resp.FinishReason, want)
	}
	if u := got.resp.Usage; u == nil || u.InputTokens != 40 || u.OutputTokens != 25 {
		t.Errorf("usage %+v, want 40 in, 25 out", u)
	}

	sent, header := srv.last()
	if _, ok := sent["temperature"]; ok || sent["system"] != "sys" {
		t.Errorf("sent temperature %v, system %v: want none and \"sys\"", sent["temperature"], sent["system"])
	}
	if header.Get("X-Api-Key") == "" {
		t.Error("no API key header: the placeholder must stand in for a missing key")
	}
	// Each tool call of the assistant turn travels as its own message,
	// since langchaingo sends only the first part of one.
	var shapes []string
	for _, msg := range sent["messages"].([]any) {
		msg := msg.(map[string]any)
		block := msg["content"].([]any)[0].(map[string]any)
		shapes = append(shapes, msg["role"].(string)+":"+block["type"].(string))
	}
	if got, want := strings.Join(shapes, ","), "user:text,assistant:text,assistant:tool_use,assistant:tool_use,user:tool_result,user:tool_result"; got != want {
		t.Errorf("messages sent as %s, want %s", got, want)
	}
}

// TestAnthropicFailedToolResults: a tool result that failed reaches
// Anthropic flagged is_error (langchaingo has no such field), and only
// that one.
func TestAnthropicFailedToolResults(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		flushLines(w, "text/event-stream", anthropicStream...)
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: srv.URL + "/v1", Name: "claude-test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	msgs := append([]history.Message(nil), toolTurn...)
	msgs[len(msgs)-1].Failed = true // pwd failed
	if got := stream(t.Context(), m, llm.Request{Messages: msgs, Temperature: -1}); got.err != nil {
		t.Fatal(got.err)
	}
	sent, _ := srv.last()
	flags := map[string]any{}
	for _, msg := range sent["messages"].([]any) {
		for _, b := range msg.(map[string]any)["content"].([]any) {
			if b := b.(map[string]any); b["type"] == "tool_result" {
				flags[b["tool_use_id"].(string)] = b["is_error"]
			}
		}
	}
	if flags["c2"] != true || flags["c1"] != nil || len(flags) != 2 {
		t.Errorf("tool results sent with is_error %v, want only c2's true", flags)
	}
}

func TestAnthropicCancelAndErrors(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		flushLines(w, "text/event-stream", anthropicStream[:3]...)
		<-r.Context().Done()
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: srv.URL, Name: "claude-test", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	got := stream(ctx, m, llm.Request{Messages: user("hi"), Temperature: -1})
	t.Logf("cancelled after %v", time.Since(start))
	if !errors.Is(got.err, context.Canceled) {
		t.Errorf("cancelled with %v, want context.Canceled", got.err)
	}

	url := closedPortURL(t)
	m, err = llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: url, Name: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("hi"), Temperature: -1}).err, "connection refused ("+url+")")

	overloaded := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		flushLines(w, "text/event-stream", anthropicStream[:3]...)
		flushLines(w, "text/event-stream", `event: error`, `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ``)
	})
	m, err = llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: overloaded.URL, Name: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("hi"), Temperature: -1}).err, "model server: Overloaded")
}
