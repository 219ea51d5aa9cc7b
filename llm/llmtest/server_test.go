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
    steps: [{sleep: 30s, text: "late"}]
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

// TestCloseCutsSleepsShort closes the server while a client waits on a
// 30-second scripted sleep.
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
	srv.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	<-finished
	http.DefaultClient.CloseIdleConnections()
}
