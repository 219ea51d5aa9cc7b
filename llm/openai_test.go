package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
)

// fixture starts llmtest with testdata/fixture.yaml.
func fixture(t testing.TB) *llmtest.Server {
	t.Helper()
	script, err := llm.LoadScript("testdata/fixture.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(script)
	t.Cleanup(srv.Close)
	return srv
}

func openAIModel(t testing.TB, baseURL string) llm.Model {
	t.Helper()
	m, err := llm.New(llm.Config{Provider: llm.ProviderOpenAI, BaseURL: baseURL, Name: "test-model", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// streamed is what one Stream call produced.
type streamed struct {
	resp      llm.Response
	err       error
	deltas    []llm.Delta
	text      string // text deltas, concatenated
	reasoning string // reasoning deltas, concatenated
}

func stream(ctx context.Context, m llm.Model, req llm.Request) streamed {
	var s streamed
	var text, reasoning strings.Builder
	s.resp, s.err = m.Stream(ctx, req, func(d llm.Delta) {
		s.deltas = append(s.deltas, d)
		switch d.Kind {
		case llm.DeltaText:
			text.WriteString(d.Text)
		case llm.DeltaReasoning:
			reasoning.WriteString(d.Text)
		}
	})
	s.text, s.reasoning = text.String(), reasoning.String()
	return s
}

func user(text string) []history.Message {
	return []history.Message{{Role: history.RoleSystem, Content: "You are a test."}, {Role: history.RoleUser, Content: text}}
}

func textDeltas(deltas []llm.Delta) int {
	n := 0
	for _, d := range deltas {
		if d.Kind == llm.DeltaText {
			n++
		}
	}
	return n
}

func TestOpenAIStreamsText(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("hello"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	const want = "Hello there, how are you today?"
	if got.resp.Text != want || got.text != want {
		t.Errorf("text = %q, deltas = %q, want %q", got.resp.Text, got.text, want)
	}
	if n := textDeltas(got.deltas); n != 6 {
		t.Errorf("%d text deltas, want one per word (6)", n)
	}
	if got.resp.FinishReason != llm.FinishStop {
		t.Errorf("finish = %q, want stop", got.resp.FinishReason)
	}
	if u := got.resp.Usage; u == nil || u.InputTokens <= 0 || u.OutputTokens != 6 {
		t.Errorf("usage = %+v, want input > 0 and output 6", u)
	}
	if srv.Requests() != 1 {
		t.Errorf("server saw %d requests, want 1", srv.Requests())
	}
}

func TestOpenAIStreamsReasoning(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("think"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.reasoning != "Let me think about it." || got.resp.Reasoning != got.reasoning {
		t.Errorf("reasoning deltas %q, response %q", got.reasoning, got.resp.Reasoning)
	}
	if got.text != "The answer is 42." || got.resp.Text != got.text {
		t.Errorf("text deltas %q, response %q", got.text, got.resp.Text)
	}
	if got.deltas[0].Kind != llm.DeltaReasoning {
		t.Errorf("first delta is %+v, want reasoning before text", got.deltas[0])
	}
	if u := got.resp.Usage; u == nil || u.ThoughtTokens != 5 || u.OutputTokens != 9 {
		t.Errorf("usage = %+v, want 5 thought tokens of 9 output tokens", u)
	}
}

func TestOpenAIAssemblesToolCalls(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("tools"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.text != "Running two commands." || got.resp.Text != got.text {
		t.Errorf("text deltas %q, response %q: tool-call JSON must not leak into text", got.text, got.resp.Text)
	}
	if got.resp.FinishReason != llm.FinishToolCalls {
		t.Errorf("finish = %q, want tool_calls", got.resp.FinishReason)
	}
	calls := got.resp.ToolCalls
	if len(calls) != 2 {
		t.Fatalf("tool calls = %+v, want 2", calls)
	}
	wantArgs := []map[string]any{
		{"command": "echo hi"},
		{"path": "/tmp/ünïcode ✓.txt", "limit": float64(10)},
	}
	for i, name := range []string{"bash", "read_file"} {
		if calls[i].Name != name || calls[i].ID == "" {
			t.Errorf("call %d = %+v, want name %s and an id", i, calls[i], name)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(calls[i].Arguments), &args); err != nil || !reflect.DeepEqual(args, wantArgs[i]) {
			t.Errorf("call %d arguments %s (%v), want %v", i, calls[i].Arguments, err, wantArgs[i])
		}
	}
	if calls[0].ID == calls[1].ID {
		t.Errorf("both calls have id %q", calls[0].ID)
	}
}

// TestOpenAIToolConversationRoundTrips sends back a tool-using turn and
// checks it reaches the server in OpenAI's shape.
func TestOpenAIToolConversationRoundTrips(t *testing.T) {
	srv := fixture(t)
	m := openAIModel(t, srv.URL())
	tools := []llm.ToolDef{
		{Name: "bash", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
		{Name: "now", Description: "The time."},
	}
	msgs := user("tools")
	first := stream(t.Context(), m, llm.Request{Messages: msgs, Tools: tools, Temperature: -1})
	if first.err != nil {
		t.Fatal(first.err)
	}
	calls := first.resp.ToolCalls
	msgs = append(msgs,
		history.Message{Role: history.RoleAssistant, Content: first.resp.Text, ToolCalls: calls},
		history.Message{Role: history.RoleTool, ToolCallID: calls[0].ID, Name: calls[0].Name, Content: "hi\n"},
		history.Message{Role: history.RoleTool, ToolCallID: calls[1].ID, Name: calls[1].Name, Content: "file body"},
	)
	second := stream(t.Context(), m, llm.Request{Messages: msgs, Tools: tools, Temperature: 0.25, MaxTokens: 100})
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.resp.Text != "Done: file body" || second.resp.FinishReason != llm.FinishStop {
		t.Errorf("second answer %q (%s), want the template filled with the last tool output", second.resp.Text, second.resp.FinishReason)
	}

	sent := srv.LastRequest()
	want := map[string]any{
		"role":    "assistant",
		"content": "Running two commands.",
		"tool_calls": []any{
			map[string]any{"id": calls[0].ID, "type": "function", "function": map[string]any{"name": "bash", "arguments": calls[0].Arguments}},
			map[string]any{"id": calls[1].ID, "type": "function", "function": map[string]any{"name": "read_file", "arguments": calls[1].Arguments}},
		},
	}
	messages := sent["messages"].([]any)
	if len(messages) != 5 {
		t.Fatalf("sent %d messages, want 5: %v", len(messages), messages)
	}
	if !reflect.DeepEqual(messages[2], want) {
		t.Errorf("assistant message sent as\n%v\nwant\n%v", messages[2], want)
	}
	for i, body := range []string{"hi\n", "file body"} {
		wantTool := map[string]any{"role": "tool", "tool_call_id": calls[i].ID, "content": body}
		if !reflect.DeepEqual(messages[3+i], wantTool) {
			t.Errorf("tool message sent as %v, want %v", messages[3+i], wantTool)
		}
	}
	if messages[0].(map[string]any)["role"] != "system" || messages[1].(map[string]any)["content"] != "tools" {
		t.Errorf("system and user messages sent as %v", messages[:2])
	}

	sentTools := sent["tools"].([]any)
	bash := sentTools[0].(map[string]any)["function"].(map[string]any)
	now := sentTools[1].(map[string]any)["function"].(map[string]any)
	if bash["name"] != "bash" || bash["parameters"].(map[string]any)["required"] == nil {
		t.Errorf("bash tool sent as %v", bash)
	}
	if now["parameters"].(map[string]any)["type"] != "object" {
		t.Errorf("a tool without parameters must get an empty object schema, sent %v", now)
	}
	if sent["temperature"] != 0.25 || sent["max_tokens"] != float64(100) || sent["stream"] != true {
		t.Errorf("temperature %v, max_tokens %v, stream %v; want 0.25, 100, true", sent["temperature"], sent["max_tokens"], sent["stream"])
	}
}

func TestOpenAIOmitsTemperatureForServerDefault(t *testing.T) {
	srv := fixture(t)
	if got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("hello"), Temperature: -1}); got.err != nil {
		t.Fatal(got.err)
	}
	sent := srv.LastRequest()
	if _, ok := sent["temperature"]; ok {
		t.Errorf("temperature sent (%v) though neither request nor config set one", sent["temperature"])
	}
	if sent["model"] != "test-model" {
		t.Errorf("model = %v, want test-model", sent["model"])
	}
}

func TestOpenAIFinishLength(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("long"), Temperature: -1})
	if got.err != nil || got.resp.FinishReason != llm.FinishLength || got.resp.Text != "a b c" {
		t.Errorf("got %q, finish %q, err %v; want \"a b c\", length", got.resp.Text, got.resp.FinishReason, got.err)
	}
}

// checkOneLine asserts err is a short single-line ErrServer error holding want.
func checkOneLine(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, llm.ErrServer) {
		t.Fatalf("error %v does not wrap ErrServer", err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") || len([]rune(msg)) > 300 {
		t.Errorf("error is not one short line: %q", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
}

func TestOpenAIErrorStep(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("fail"), Temperature: -1})
	checkOneLine(t, got.err, "model server: HTTP 500: boom second line")
}

func TestOpenAIGarbageStream(t *testing.T) {
	srv := fixture(t)
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("garbage"), Temperature: -1})
	checkOneLine(t, got.err, "malformed stream", "{not json")
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/v1"
}

func TestOpenAIServerDown(t *testing.T) {
	url := closedPortURL(t)
	got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("hello"), Temperature: -1})
	checkOneLine(t, got.err, "model server: connection refused ("+url+")")
}

func TestOpenAICancelDuringStream(t *testing.T) {
	srv := fixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	got := stream(ctx, openAIModel(t, srv.URL()), llm.Request{Messages: user("hang"), Temperature: -1})
	t.Logf("the cancelled call returned after %v", time.Since(start))
	if !errors.Is(got.err, context.Canceled) || errors.Is(got.err, llm.ErrServer) {
		t.Errorf("error %v, want context.Canceled and no ErrServer", got.err)
	}
}

func TestOpenAIDeadlineIsServerTimeout(t *testing.T) {
	srv := fixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	got := stream(ctx, openAIModel(t, srv.URL()), llm.Request{Messages: user("hang"), Temperature: -1})
	checkOneLine(t, got.err, "timeout")
	if !errors.Is(got.err, context.DeadlineExceeded) {
		t.Errorf("error %v does not match context.DeadlineExceeded", got.err)
	}
}

// TestOpenAIConcurrentCalls shares one Model between many goroutines.
func TestOpenAIConcurrentCalls(t *testing.T) {
	srv := fixture(t)
	m := openAIModel(t, srv.URL())
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			prompt := []string{"hello", "tools", "think"}[i%3]
			got := stream(t.Context(), m, llm.Request{Messages: user(prompt), Temperature: -1})
			switch {
			case got.err != nil:
				errs <- got.err
			case got.text != got.resp.Text:
				errs <- fmt.Errorf("%s: deltas %q, text %q", prompt, got.text, got.resp.Text)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// rawServer serves body as the answer to any chat request, with status.
func rawServer(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestOpenAIServerQuirks covers what real servers send that llmtest does
// not: mixed deltas, mid-stream errors, non-JSON error pages.
func TestOpenAIServerQuirks(t *testing.T) {
	const sse = "text/event-stream"
	t.Run("content and tool call in one delta", func(t *testing.T) {
		url := rawServer(t, 200, sse, `data: {"choices":[{"delta":{"content":"Let me "}}]}

data: {"choices":[{"delta":{"content":"check.","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":"}}]}}]}

data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}

data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.text != "Let me check." || got.resp.Text != got.text {
			t.Errorf("deltas %q, text %q: want both \"Let me check.\"", got.text, got.resp.Text)
		}
		want := []history.ToolCall{{ID: "c1", Name: "bash", Arguments: `{"command":"ls"}`}}
		if !reflect.DeepEqual(got.resp.ToolCalls, want) {
			t.Errorf("tool calls %+v, want %+v", got.resp.ToolCalls, want)
		}
	})
	t.Run("text that looks like JSON", func(t *testing.T) {
		url := rawServer(t, 200, sse, `data: {"choices":[{"delta":{"content":"[{\"id\": 1}]"}}]}

data: [DONE]

`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		if got.err != nil || got.text != `[{"id": 1}]` {
			t.Errorf("deltas %q, err %v: JSON-looking text must stream as text", got.text, got.err)
		}
	})
	t.Run("llama.cpp error event", func(t *testing.T) {
		url := rawServer(t, 200, sse, `data: {"choices":[{"delta":{"content":"Hi"}}]}

error: {"code":500,"message":"context shift disabled","type":"server_error"}

`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		checkOneLine(t, got.err, "model server: context shift disabled")
	})
	t.Run("error object in a data line", func(t *testing.T) {
		url := rawServer(t, 200, sse, `data: {"error":{"message":"out of memory","type":"server_error"}}

`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		checkOneLine(t, got.err, "model server: out of memory")
	})
	t.Run("HTML error page", func(t *testing.T) {
		url := rawServer(t, 502, "text/html", "<html>\n<body>\nBad gateway\n</body>\n</html>\n"+strings.Repeat("x", 1000))
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		checkOneLine(t, got.err, "model server: HTTP 502: <html> <body> Bad gateway")
	})
	t.Run("JSON answer to a streaming request", func(t *testing.T) {
		url := rawServer(t, 200, "application/json", `{"choices":[{"message":{"content":"hi"}}]}`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		checkOneLine(t, got.err, "malformed stream: no events")
	})
	t.Run("no key is fine, a wrong one is a clear error", func(t *testing.T) {
		url := rawServer(t, 401, "application/json", `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
		got := stream(t.Context(), openAIModel(t, url), llm.Request{Messages: user("x"), Temperature: -1})
		checkOneLine(t, got.err, "HTTP 401: Incorrect API key provided")
	})
}
