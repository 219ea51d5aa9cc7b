package llm_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
)

// This file tests stream events longer than langchaingo's clients read in
// one line (64 KiB for OpenAI and Anthropic, 512,000 bytes for Ollama): a
// server that buffers (vLLM's tool parsers, some proxies) sends a long text
// or a tool call's whole arguments in one event, and the call must end as
// if the server had streamed them in pieces.

// longText is about n bytes of text that JSON escapes in every way: quotes,
// backslashes, newlines, tabs, control and HTML characters, U+2028, and
// characters of two, three and four bytes, so that pieces cut from it fall
// inside escapes and characters alike.
func longText(n int) string {
	const mix = "func main() {\n\tfmt.Println(\"héllo, 世界 🙂\\n\") // <a & b>\x01\u2028\r\n}\n"
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(mix)
		b.WriteString(strings.Repeat("x", i%7))
	}
	return b.String()
}

// jsonText is s as a JSON string, which YAML reads as the same string.
func jsonText(s string) string {
	data, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// bufferedServer serves script from a server that sends each part of an
// answer in one event.
func bufferedServer(t *testing.T, script string) (*llmtest.Server, *llm.Script) {
	t.Helper()
	sc, err := llm.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(sc)
	t.Cleanup(srv.Close)
	srv.SetBuffered(true)
	return srv, sc
}

func TestOpenAILongText(t *testing.T) {
	reasoning, text := longText(200_000), longText(210_000)
	srv, _ := bufferedServer(t, "rules:\n  - match: \"\"\n    steps: [{reasoning: "+jsonText(reasoning)+", text: "+jsonText(text)+"}]\n")
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.resp.Text != text || got.text != text {
		t.Errorf("text of %d bytes, deltas of %d: want the %d bytes sent", len(got.resp.Text), len(got.text), len(text))
	}
	if got.resp.Reasoning != reasoning || got.reasoning != reasoning {
		t.Errorf("reasoning of %d bytes, deltas of %d: want the %d bytes sent", len(got.resp.Reasoning), len(got.reasoning), len(reasoning))
	}
	if got.resp.FinishReason != llm.FinishStop {
		t.Errorf("finish %q, want stop", got.resp.FinishReason)
	}
}

func TestOpenAILongToolCall(t *testing.T) {
	content := longText(200_000)
	srv, sc := bufferedServer(t, `rules:
  - match: ""
    steps:
      - text: "Writing."
        toolCalls:
          - {name: write_file, args: {path: big.txt, content: `+jsonText(content)+`}}
          - {name: bash, args: {command: "wc -c big.txt"}}
`)
	want := sc.Answer(user("write")).ToolCalls
	got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	calls := got.resp.ToolCalls
	if len(calls) != 2 || calls[0].Name != "write_file" || calls[1].Name != "bash" || calls[0].ID == "" || calls[0].ID == calls[1].ID {
		t.Fatalf("tool calls %.200v, want write_file and bash", calls)
	}
	for i := range calls {
		if calls[i].Arguments != want[i].Arguments {
			t.Errorf("call %d: arguments of %d bytes, want the %d bytes sent", i, len(calls[i].Arguments), len(want[i].Arguments))
		}
	}
	if got.text != "Writing." || got.resp.Text != got.text || got.resp.FinishReason != llm.FinishToolCalls {
		t.Errorf("text %q (deltas %q), finish %q", got.resp.Text, got.text, got.resp.FinishReason)
	}
}

// anthropicEvents streams an Anthropic answer whose blocks are each one
// delta: a block is {type, text}, a tool_use block's text its input JSON.
func anthropicEvents(blocks ...[2]string) []string {
	event := func(v map[string]any) string {
		data, _ := json.Marshal(v)
		return "data: " + string(data)
	}
	lines := []string{
		`event: message_start`,
		`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":40,"output_tokens":1}}}`,
		``,
	}
	stop := "end_turn"
	for i, b := range blocks {
		start := map[string]any{"type": b[0], b[0]: ""}
		delta := map[string]any{"type": b[0] + "_delta", b[0]: b[1]}
		if b[0] == "tool_use" {
			start = map[string]any{"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": map[string]any{}}
			delta = map[string]any{"type": "input_json_delta", "partial_json": b[1]}
			stop = "tool_use"
		}
		lines = append(lines,
			`event: content_block_start`, event(map[string]any{"type": "content_block_start", "index": i, "content_block": start}), ``,
			`event: content_block_delta`, event(map[string]any{"type": "content_block_delta", "index": i, "delta": delta}), ``,
			`event: content_block_stop`, event(map[string]any{"type": "content_block_stop", "index": i}), ``)
	}
	return append(lines,
		`event: message_delta`, `data: {"type":"message_delta","delta":{"stop_reason":"`+stop+`"},"usage":{"output_tokens":25}}`, ``,
		`event: message_stop`, `data: {"type":"message_stop"}`, ``)
}

func anthropicServer(t *testing.T, lines []string) llm.Model {
	t.Helper()
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { flushLines(w, "text/event-stream", lines...) })
	m, err := llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: srv.URL + "/v1", Name: "claude-test", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAnthropicLongText(t *testing.T) {
	thinking, text := longText(200_000), longText(210_000)
	m := anthropicServer(t, anthropicEvents([2]string{"thinking", thinking}, [2]string{"text", text}))
	got := stream(t.Context(), m, llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.resp.Text != text || got.text != text {
		t.Errorf("text of %d bytes, deltas of %d: want the %d bytes sent", len(got.resp.Text), len(got.text), len(text))
	}
	if got.resp.Reasoning != thinking {
		t.Errorf("reasoning of %d bytes, want the %d bytes sent", len(got.resp.Reasoning), len(thinking))
	}
}

func TestAnthropicLongToolCall(t *testing.T) {
	content := longText(200_000)
	input, _ := json.Marshal(map[string]string{"path": "big.txt", "content": content})
	m := anthropicServer(t, anthropicEvents([2]string{"text", "Writing."}, [2]string{"tool_use", string(input)}))
	got := stream(t.Context(), m, llm.Request{Messages: user("write"), Temperature: -1, Tools: []llm.ToolDef{{Name: "write_file"}}})
	if got.err != nil {
		t.Fatal(got.err)
	}
	calls := got.resp.ToolCalls
	if len(calls) != 1 || calls[0].Name != "write_file" || got.resp.FinishReason != llm.FinishToolCalls {
		t.Fatalf("tool calls %.200v (%s), want one write_file", calls, got.resp.FinishReason)
	}
	// langchaingo decodes the input and encodes it again: the content must
	// come through byte for byte, the keys in whatever order.
	var args map[string]string
	if err := json.Unmarshal([]byte(calls[0].Arguments), &args); err != nil || args["content"] != content || args["path"] != "big.txt" {
		t.Errorf("arguments %.200s (%v): want the %d bytes of content sent", calls[0].Arguments, err, len(content))
	}
}

// TestOllamaLongText sends a line longer than the 512,000 bytes
// langchaingo's Ollama client reads in one line.
func TestOllamaLongText(t *testing.T) {
	text := longText(600_000)
	line, _ := json.Marshal(map[string]any{"model": "m", "message": map[string]string{"role": "assistant", "content": text}, "done": false})
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		flushLines(w, "application/x-ndjson",
			`{"model":"m","message":{"role":"assistant","content":"Here: "},"done":false}`,
			string(line),
			`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":30,"eval_count":3}`)
	})
	m, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL, Name: "qwen3", Temperature: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := stream(t.Context(), m, llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if want := "Here: " + text; got.resp.Text != want || got.text != want {
		t.Errorf("text of %d bytes, deltas of %d: want the %d bytes sent", len(got.resp.Text), len(got.text), len(want))
	}
	if u := got.resp.Usage; u == nil || u.InputTokens != 30 {
		t.Errorf("usage %+v: the done line after the long one is lost", u)
	}
}

// openAIServer answers with chunks, each a data line, then [DONE].
func openAIServer(t *testing.T, chunks ...map[string]any) llm.Model {
	t.Helper()
	var lines []string
	for _, c := range chunks {
		data, _ := json.Marshal(c)
		lines = append(lines, "data: "+string(data), "")
	}
	lines = append(lines, "data: [DONE]", "")
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { flushLines(w, "text/event-stream", lines...) })
	return openAIModel(t, srv.URL)
}

// chunk is an OpenAI stream chunk of one choice.
func chunk(delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": "c", "object": "chat.completion.chunk", "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
}

// TestOpenAILongChunk sends all of an answer in one chunk, as a proxy that
// buffers the whole response may: reasoning, text, two tool calls of which
// the first is long, the finish and the usage. The chunk is rewritten into
// several, and the answer is the same.
func TestOpenAILongChunk(t *testing.T) {
	reasoning, text, args := longText(100_000), longText(120_000), jsonText(longText(150_000))
	c := chunk(map[string]any{
		"role": "assistant", "reasoning_content": reasoning, "content": text,
		"tool_calls": []any{
			map[string]any{"index": 0, "id": "call_1", "type": "function", "function": map[string]any{"name": "write_file", "arguments": args}},
			map[string]any{"index": 1, "id": "call_2", "type": "function", "function": map[string]any{"name": "bash", "arguments": `{"command":"ls"}`}},
		},
	}, "length")
	c["usage"] = map[string]any{"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}
	got := stream(t.Context(), openAIServer(t, c), llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.resp.Text != text || got.text != text || got.resp.Reasoning != reasoning || got.reasoning != reasoning {
		t.Errorf("text %d bytes (deltas %d), reasoning %d (deltas %d): want %d and %d",
			len(got.resp.Text), len(got.text), len(got.resp.Reasoning), len(got.reasoning), len(text), len(reasoning))
	}
	want := []history.ToolCall{{ID: "call_1", Name: "write_file", Arguments: args}, {ID: "call_2", Name: "bash", Arguments: `{"command":"ls"}`}}
	if calls := got.resp.ToolCalls; len(calls) != 2 || calls[0] != want[0] || calls[1] != want[1] {
		t.Errorf("tool calls %.300v, want write_file with its %d bytes, then bash", calls, len(args))
	}
	if u := got.resp.Usage; u == nil || u.InputTokens != 7 || u.OutputTokens != 9 {
		t.Errorf("usage %+v, want 7 in, 9 out", u)
	}
}

// TestOpenAILongChunkFinish: the finish_reason of a long chunk is the
// answer's, although langchaingo takes it from whichever chunk comes last.
func TestOpenAILongChunkFinish(t *testing.T) {
	text := longText(100_000)
	got := stream(t.Context(), openAIServer(t, chunk(map[string]any{"content": text}, "length")), llm.Request{Messages: user("write"), Temperature: -1})
	if got.err != nil || got.resp.Text != text || got.resp.FinishReason != llm.FinishLength {
		t.Errorf("error %v, text of %d bytes, finish %q: want the %d bytes and length", got.err, len(got.resp.Text), got.resp.FinishReason, len(text))
	}
}

// TestLongEventsThatCannotBeCut: an event over the library's line that holds
// no long text or arguments fails the call in one line that says so,
// rather than losing part of the answer.
func TestLongEventsThatCannotBeCut(t *testing.T) {
	pad := strings.Repeat("x", 100_000)
	withLogprobs := chunk(map[string]any{"content": pad}, nil)
	withLogprobs["choices"].([]any)[0].(map[string]any)["logprobs"] = map[string]any{"content": pad}
	twoChoices := chunk(map[string]any{"content": pad}, nil)
	twoChoices["choices"] = append(twoChoices["choices"].([]any), map[string]any{"index": 1, "delta": map[string]any{"content": "b"}})
	ollamaLine, _ := json.Marshal(map[string]any{"model": "m", "message": map[string]any{"role": "assistant", "content": "hi"}, "context": pad + pad + pad + pad + pad + pad})
	for _, tc := range []struct {
		name  string
		model func(t *testing.T) llm.Model
		want  string
	}{
		{"openai logprobs", func(t *testing.T) llm.Model { return openAIServer(t, withLogprobs) },
			"model server: a stream event of 195.5 KiB (99.5 KiB of it is not text or tool-call arguments), over what mm can read in one event (64 KiB)"},
		{"openai two choices", func(t *testing.T) llm.Model { return openAIServer(t, twoChoices) },
			"model server: a stream event of 97.8 KiB (not text or tool-call arguments), over what mm can read in one event (64 KiB)"},
		{"anthropic block start", func(t *testing.T) llm.Model {
			return anthropicServer(t, []string{
				`event: message_start`,
				`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":40,"output_tokens":1}}}`, ``,
				`event: content_block_start`, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":"` + pad + `"}}`, ``,
			})
		}, "model server: a stream event of 97.7 KiB (not text or tool-call arguments), over what mm can read in one event (64 KiB)"},
		{"ollama context", func(t *testing.T) llm.Model {
			srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
				flushLines(w, "application/x-ndjson", string(ollamaLine))
			})
			m, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL, Name: "qwen3", Temperature: -1})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, "model server: a stream event of 586 KiB (not text or tool-call arguments), over what mm can read in one event (500 KiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := stream(t.Context(), tc.model(t), llm.Request{Messages: user("write"), Temperature: -1})
			if got.err == nil || got.err.Error() != tc.want || !errors.Is(got.err, llm.ErrServer) {
				t.Errorf("error %v\nwant %s", got.err, tc.want)
			}
		})
	}
}

// TestEndlessEvent: a server that sends one event without end costs the
// call at most maxEvent (8 MiB) of memory: the call fails once that much
// is read, without waiting for the rest.
func TestEndlessEvent(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"`)
		block := strings.Repeat("a", 64<<10)
		for i := 0; i < 1<<10 && r.Context().Err() == nil; i++ { // 64 MiB at most
			if _, err := io.WriteString(w, block); err != nil {
				return
			}
		}
		<-r.Context().Done()
	})
	got := stream(t.Context(), openAIModel(t, srv.URL), llm.Request{Messages: user("write"), Temperature: -1})
	if want := "model server: a stream event over 8 MiB, more than mm reads of one event"; got.err == nil || got.err.Error() != want {
		t.Errorf("error %v, want %s", got.err, want)
	}
}
