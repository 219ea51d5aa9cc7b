package llmtest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const script = `
rules:
  - match: "^tools$"
    steps:
      - reasoning: "Plan."
        text: "Running."
        toolCalls:
          - {name: bash, args: {command: "echo hi"}}
          - {name: read, args: {path: "/tmp/a"}}
  - match: "^fail$"
    steps: [{error: "boom"}]
  - match: "^garbage$"
    steps: [{garbage: true}]
  - match: "^hang$"
    steps: [{sleep: 1h, text: "late"}]
usage: true
`

func newServer(t *testing.T) *llmtest.Server {
	t.Helper()
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *llmtest.Server, body map[string]any) *http.Response {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func request(prompt string, stream, usage bool) map[string]any {
	req := map[string]any{
		"model":    "m",
		"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}}},
		"stream":   stream,
	}
	if usage {
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	return req
}

// chunkShape is the part of a stream chunk the tests read.
type chunkShape struct {
	Choices []struct {
		Delta struct {
			Role             string `json:"role"`
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      *string `json:"name"`
					Arguments string  `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// readStream returns the decoded chunks and whether [DONE] ended them.
func readStream(t *testing.T, body io.Reader) (chunks []chunkShape, done bool) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || done {
			t.Fatalf("unexpected line %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c chunkShape
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

func TestStreamWireFormat(t *testing.T) {
	srv := newServer(t)
	resp := post(t, srv, request("tools", true, true))
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	chunks, done := readStream(t, resp.Body)
	if !done {
		t.Error("stream not ended by [DONE]")
	}
	if chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %+v, want the assistant role", chunks[0])
	}

	var text, reasoning string
	fragments := map[int][]string{} // call index → argument pieces
	heads := map[int]string{}       // call index → name, from the fragment with the id
	var finish string
	var usageSeen bool
	for _, c := range chunks {
		if c.Usage != nil {
			usageSeen = len(c.Choices) == 0 && c.Usage.PromptTokens > 0 && c.Usage.CompletionTokens > 0
			continue
		}
		ch := c.Choices[0]
		text += ch.Delta.Content
		reasoning += ch.Delta.ReasoningContent
		for _, tc := range ch.Delta.ToolCalls {
			if tc.ID != "" {
				if tc.Type != "function" || tc.Function.Name == nil || tc.Function.Arguments != "" {
					t.Errorf("call %d header %+v, want type, name and no arguments", tc.Index, tc)
				}
				heads[tc.Index] = *tc.Function.Name
				continue
			}
			if _, ok := heads[tc.Index]; !ok || tc.Function.Name != nil {
				t.Errorf("argument fragment %+v before its header or with a name", tc)
			}
			fragments[tc.Index] = append(fragments[tc.Index], tc.Function.Arguments)
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	if text != "Running." || reasoning != "Plan." || finish != llm.FinishToolCalls || !usageSeen {
		t.Errorf("text %q, reasoning %q, finish %q, usage chunk %v", text, reasoning, finish, usageSeen)
	}
	wantArgs := map[int]string{0: `{"command":"echo hi"}`, 1: `{"path":"/tmp/a"}`}
	for i, name := range []string{"bash", "read"} {
		if heads[i] != name || len(fragments[i]) < 2 || strings.Join(fragments[i], "") != wantArgs[i] {
			t.Errorf("call %d: name %q, fragments %q; want %s in 2+ pieces", i, heads[i], fragments[i], wantArgs[i])
		}
	}
	if srv.Requests() != 1 || srv.LastRequest()["model"] != "m" {
		t.Errorf("requests %d, last %v", srv.Requests(), srv.LastRequest())
	}
}

func TestStreamWithoutUsageOption(t *testing.T) {
	srv := newServer(t)
	chunks, _ := readStream(t, post(t, srv, request("hello", true, false)).Body)
	for _, c := range chunks {
		if c.Usage != nil {
			t.Errorf("usage chunk sent though the request did not ask: %+v", c)
		}
	}
}

func TestNonStreamingCompletion(t *testing.T) {
	srv := newServer(t)
	var got struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(post(t, srv, request("tools", false, false)).Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	c := got.Choices[0]
	if c.Message.Content != "Running." || c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 2 ||
		c.Message.ToolCalls[1].Function.Arguments != `{"path":"/tmp/a"}` || got.Usage.CompletionTokens == 0 {
		t.Errorf("completion %+v", got)
	}
}

func TestErrorAndGarbageSteps(t *testing.T) {
	srv := newServer(t)
	resp := post(t, srv, request("fail", true, true))
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 500 || body.Error.Message != "boom" {
		t.Errorf("error step: status %d, message %q", resp.StatusCode, body.Error.Message)
	}
	resp = post(t, srv, request("garbage", true, true))
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(data), "data: {not json") {
		t.Errorf("garbage step: status %d, body %q", resp.StatusCode, data)
	}
}

func TestPropsAndModels(t *testing.T) {
	srv := newServer(t)
	root := strings.TrimSuffix(srv.URL(), "/v1")
	srv.SetContextWindow(1234)
	var props struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	resp, err := http.Get(root + "/props")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&props)
	resp.Body.Close()
	if props.Settings.NCtx != 1234 {
		t.Errorf("n_ctx %d, want 1234", props.Settings.NCtx)
	}
	resp, err = http.Get(srv.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/v1/models: %d", resp.StatusCode)
	}
	if srv.LastRequest() != nil || srv.Requests() != 0 {
		t.Error("non-chat requests must not count")
	}
}

// TestCloseCutsSleepsShort closes the server while a client waits on an
// hour's scripted sleep: a Close that waited for it would reach the hang
// bound.
func TestCloseCutsSleepsShort(t *testing.T) {
	s, _ := llm.ParseScript([]byte(script))
	srv := llmtest.NewServer(s)
	started, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		data, _ := json.Marshal(request("hang", true, false))
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(data))
		close(started)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started // the role chunk has arrived: the handler is in its sleep
	start := time.Now()
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start))
	case <-time.After(testwait.Hang):
		t.Fatalf("Close waited %v for an hour's sleep", testwait.Hang)
	}
	<-finished
	http.DefaultClient.CloseIdleConnections()
}

// client is a keep-alive client of its own, closed with the test, so that
// connection counts do not depend on other tests' pools.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func postWith(t *testing.T, c *http.Client, srv *llmtest.Server, body map[string]any) *http.Response {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := c.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func errorOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return body.Error.Message
}

func TestFailNext(t *testing.T) {
	srv := newServer(t)
	srv.FailNext(2, http.StatusServiceUnavailable, "3")
	for i := range 2 {
		resp := post(t, srv, request("hello", true, false))
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || errorOf(t, resp) != "busy" {
			t.Errorf("request %d: status %d, Retry-After %q", i+1, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if _, done := readStream(t, post(t, srv, request("hello", true, false)).Body); !done {
		t.Error("the third request must be answered")
	}
	srv.FailNext(1, http.StatusTooManyRequests, "")
	if resp := post(t, srv, request("hello", true, false)); resp.StatusCode != 429 || resp.Header["Retry-After"] != nil {
		t.Errorf("status %d, Retry-After %q; want 429 and none", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if srv.Requests() != 4 {
		t.Errorf("%d requests, want 4: refused ones count", srv.Requests())
	}
}

const faultScript = `
rules:
  - match: "^stall$"
    steps: [{reasoning: "Hmm.", text: "Let me see.", stall: true}]
  - match: "^truncate$"
    steps:
      - text: "Half an answer"
        truncate: true
        toolCalls: [{name: bash}]
`

func faultServer(t *testing.T) *llmtest.Server {
	t.Helper()
	s, err := llm.ParseScript([]byte(faultScript))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// TestStall reads the role chunk and the first word, then finds nothing
// more until the server closes.
func TestStall(t *testing.T) {
	srv := faultServer(t)
	resp := post(t, srv, request("stall", true, false))
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
	}()
	var got []chunkShape
	for range 2 {
		var c chunkShape
		json.Unmarshal([]byte(strings.TrimPrefix(<-lines, "data: ")), &c)
		got = append(got, c)
	}
	if len(got[0].Choices) == 0 || len(got[1].Choices) == 0 {
		t.Fatalf("chunks %+v, want two", got)
	}
	if got[0].Choices[0].Delta.Role != "assistant" || got[1].Choices[0].Delta.Content != "Let" {
		t.Errorf("chunks %+v, want the role, then the first word of the text", got)
	}
	select {
	case line := <-lines:
		t.Errorf("a stalled stream sent %q", line)
	case <-time.After(200 * time.Millisecond):
	}
	srv.Close()
	for line := range lines {
		t.Errorf("a stalled stream sent %q", line)
	}
}

// TestTruncate streams the words, then ends the response without a finish
// chunk, a tool call or [DONE].
func TestTruncate(t *testing.T) {
	srv := faultServer(t)
	chunks, done := readStream(t, post(t, srv, request("truncate", true, true)).Body)
	var text string
	for _, c := range chunks {
		if len(c.Choices) == 0 {
			t.Fatalf("usage chunk %+v in a truncated stream", c)
		}
		ch := c.Choices[0]
		if ch.FinishReason != nil || len(ch.Delta.ToolCalls) > 0 {
			t.Errorf("chunk %+v: a truncated stream has no finish and no tool call", c)
		}
		text += ch.Delta.Content
	}
	if text != "Half an answer" || done {
		t.Errorf("text %q, [DONE] %v; want the whole text and no [DONE]", text, done)
	}
}

func TestOversized(t *testing.T) {
	srv := newServer(t)
	long := strings.Repeat("word ", 400) // 2000 characters: 500 tokens
	if resp := post(t, srv, request(long, true, false)); resp.StatusCode != 200 {
		t.Fatalf("status %d before SetContextWindow: no window is enforced by default", resp.StatusCode)
	}
	srv.SetContextWindow(300)
	resp := post(t, srv, request(long, true, false))
	want := "the request exceeds the available context size (500 tokens, n_ctx 300)"
	if msg := errorOf(t, resp); resp.StatusCode != 400 || msg != want {
		t.Errorf("status %d, message %q; want 400, %q", resp.StatusCode, msg, want)
	}
	if resp := post(t, srv, request("hello", true, false)); resp.StatusCode != 200 {
		t.Errorf("a small prompt got status %d", resp.StatusCode)
	}
	// Tool definitions count too, a token per four bytes of their JSON.
	req := request("hello", true, false)
	req["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "t", "description": strings.Repeat("d", 1200)}}}
	if resp := post(t, srv, req); resp.StatusCode != 400 {
		t.Errorf("a prompt oversized by its tools got status %d", resp.StatusCode)
	}
	if srv.Oversized() != 2 || srv.MaxPromptTokens() != 500 {
		t.Errorf("oversized %d, max prompt %d; want 2 and 500", srv.Oversized(), srv.MaxPromptTokens())
	}
}

func TestConnections(t *testing.T) {
	srv := newServer(t)
	c := client(t)
	for range 3 {
		readStream(t, postWith(t, c, srv, request("hello", true, false)).Body)
	}
	if n := srv.Connections(); n != 1 {
		t.Errorf("3 sequential requests on a keep-alive client: %d connections, want 1", n)
	}
	readStream(t, post(t, srv, request("hello", true, false)).Body)
	if n := srv.Connections(); n != 2 {
		t.Errorf("a second client: %d connections, want 2", n)
	}
}

// TestBuffered streams each part of the answer in one chunk: the
// reasoning, the text, and each tool call with its id, name and whole
// arguments.
func TestBuffered(t *testing.T) {
	srv := newServer(t)
	srv.SetBuffered(true)
	chunks, done := readStream(t, post(t, srv, request("tools", true, true)).Body)
	if !done || len(chunks) != 7 {
		t.Fatalf("%d chunks, [DONE] %v; want 7: role, reasoning, text, two calls, finish, usage", len(chunks), done)
	}
	if d := chunks[1].Choices[0].Delta; d.ReasoningContent != "Plan." {
		t.Errorf("chunk 1 %+v, want the whole reasoning", d)
	}
	if d := chunks[2].Choices[0].Delta; d.Content != "Running." {
		t.Errorf("chunk 2 %+v, want the whole text", d)
	}
	for i, want := range []string{`bash {"command":"echo hi"}`, `read {"path":"/tmp/a"}`} {
		calls := chunks[3+i].Choices[0].Delta.ToolCalls
		if len(calls) != 1 || calls[0].Index != i || calls[0].ID == "" || calls[0].Type != "function" || calls[0].Function.Name == nil ||
			*calls[0].Function.Name+" "+calls[0].Function.Arguments != want {
			t.Errorf("chunk %d: %+v, want call %d whole: %s", 3+i, calls, i, want)
		}
	}
	if f := chunks[5].Choices[0].FinishReason; f == nil || *f != llm.FinishToolCalls || chunks[6].Usage == nil {
		t.Errorf("finish %v, usage %+v", f, chunks[6].Usage)
	}
}
