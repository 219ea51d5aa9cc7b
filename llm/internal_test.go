package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tmc/langchaingo/llms"

	"github.com/mm-agent/mm/history"
)

func TestServerErrIsOneBoundedLine(t *testing.T) {
	err := serverErr("HTTP 500: %s", strings.Repeat("é\n", 1000))
	msg := err.Error()
	if !errors.Is(err, ErrServer) || strings.Contains(msg, "\n") || len([]rune(msg)) > maxErrorLen || !strings.HasSuffix(msg, "…") {
		t.Errorf("%q (%d chars)", msg, len([]rune(msg)))
	}
}

func TestIsToolCallChunk(t *testing.T) {
	for chunk, want := range map[string]bool{
		`[{"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]`: true,
		`[{"type":"","function":{"name":"","arguments":"{\"a\":"}}]`:                true,
		`[{"id": "c1"}]`:               false, // not langchaingo's encoding
		`[{"type":"x"}] and more text`: false,
		`Hello`:                        false,
	} {
		if got := isToolCallChunk([]byte(chunk)); got != want {
			t.Errorf("isToolCallChunk(%s) = %v, want %v", chunk, got, want)
		}
	}
}

func TestDeleteJSONKey(t *testing.T) {
	out, err := deleteJSONKey([]byte(`{"model":"m","options":{"temperature":0,"num_predict":5}}`), "options.temperature")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	json.Unmarshal(out, &doc)
	if opts := doc["options"].(map[string]any); len(opts) != 1 || opts["num_predict"] != float64(5) || doc["model"] != "m" {
		t.Errorf("got %s", out)
	}
	if out, _ := deleteJSONKey([]byte(`{"a":1}`), "options.temperature"); string(out) != `{"a":1}` {
		t.Errorf("a missing path must leave the body alone, got %s", out)
	}
}

// TestStreamBodySplitLines reads streams a byte at a time, so that every
// line arrives in pieces.
func TestStreamBodySplitLines(t *testing.T) {
	for body, wantErr := range map[string]string{
		"data: {\"choices\":[]}\r\n\r\n: comment\nevent: x\ndata: [DONE]\n": "",
		"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}":                "",
		"data: {\"choices\":[]}\n\ndata: {\"choices\":[":                    "malformed stream",
		"data: {\"error\":\"overloaded\"}\n":                                "model server: overloaded",
		"\n\n":                                                              "no events",
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n":       "ended the stream early",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"finish_reason\\\":\\\"x\\\"\"}}]}\n\n": "ended the stream early",
	} {
		c := &call{}
		b := (&guard{sse: true, finished: openAIFinished, lineLimit: sseLineLimit, split: splitOpenAI}).watch(io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), c)
		_, err := io.ReadAll(b)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr) || c.failure() != err):
			t.Errorf("%q: error %v (recorded %v), want %q", body, err, c.failure(), wantErr)
		}
	}
}

func TestFinishDetectors(t *testing.T) {
	for _, tc := range []struct {
		finished func([]byte) bool
		line     string
		want     bool
	}{
		{openAIFinished, `[DONE]`, true},
		{openAIFinished, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, true},
		{openAIFinished, `{"choices":[{"delta":{}, "finish_reason" :  "length"}]}`, true},
		{openAIFinished, `{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}`, false},
		{openAIFinished, `{"choices":[{"delta":{"content":"\"finish_reason\":\"stop\""}}]}`, false},
		{openAIFinished, `{"choices":[{"delta":{"content":"finish_reason"}}]}`, false},
		{anthropicFinished, `{"type":"message_stop"}`, true},
		{anthropicFinished, `{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`, true},
		{anthropicFinished, `{"type":"message_start","message":{"stop_reason":null}}`, false},
		{anthropicFinished, `{"type":"content_block_delta","delta":{"type":"text_delta","text":"\"type\":\"message_stop\""}}`, false},
		{ollamaFinished, `{"message":{"content":""},"done":true}`, true},
		{ollamaFinished, `{"message":{"content":""}, "done" : true}`, true},
		{ollamaFinished, `{"message":{"content":"\"done\":true"},"done":false}`, false},
	} {
		if got := tc.finished([]byte(tc.line)); got != tc.want {
			t.Errorf("%s: finished %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for header, want := range map[string]struct {
		wait time.Duration
		ok   bool
	}{
		"":                              {0, false},
		"4":                             {4 * time.Second, true},
		" 120 ":                         {120 * time.Second, true},
		"-1":                            {0, false},
		"soon":                          {0, false},
		"99999999999999999999":          {0, false}, // not an int64: unreadable
		"9999999999":                    {1e9 * time.Second, true},
		"Thu, 02 Jan 2025 03:04:15 GMT": {10 * time.Second, true},
		"Thu, 02 Jan 2025 03:04:00 GMT": {0, true},
	} {
		h := http.Header{}
		if header != "" {
			h.Set("Retry-After", header)
		}
		wait, ok := retryAfter(h, now)
		if wait != want.wait || ok != want.ok {
			t.Errorf("Retry-After %q: %v, %v; want %v, %v", header, wait, ok, want.wait, want.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt, base := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		for range 20 {
			if d := backoff(time.Second, attempt); d < base || d >= base+base/2 || d > maxRetryWait {
				t.Fatalf("attempt %d: %v, want [%v, %v) and at most %v", attempt, d, base, base+base/2, maxRetryWait)
			}
		}
	}
	for _, attempt := range []int{5, 40, 100} {
		if d := backoff(time.Second, attempt); d != maxRetryWait {
			t.Errorf("attempt %d: %v, want the cap %v", attempt, d, maxRetryWait)
		}
	}
}

func TestWaitText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Millisecond:   "10 ms",
		1500 * time.Microsecond: "2 ms",
		time.Second:             "1 s",
		3100 * time.Millisecond: "4 s",
	} {
		if got := waitText(d); got != want {
			t.Errorf("waitText(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestStatusErrorKeepsItsNote clips the server's message, not the note.
func TestStatusErrorKeepsItsNote(t *testing.T) {
	msg := statusError(503, []byte(strings.Repeat("x", 1000)), " (after 3 retries)").Error()
	if !strings.HasSuffix(msg, "… (after 3 retries)") || len([]rune(msg)) > maxErrorLen {
		t.Errorf("%q (%d chars)", msg, len([]rune(msg)))
	}
}

// TestRehearsal: each provider's canned answer is a complete answer to
// its own client, and a rehearsed call sends nothing; Warm rehearses once.
func TestRehearsal(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	}))
	defer srv.Close()
	for _, provider := range []string{ProviderOpenAI, ProviderAnthropic, ProviderOllama} {
		m, err := New(Config{Provider: provider, BaseURL: srv.URL, Name: "m", Temperature: -1, Retries: 2})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		ctx := context.WithValue(t.Context(), rehearsalKey{}, true)
		resp, err := m.Stream(ctx, rehearsalRequest, func(d Delta) { text += d.Text })
		if err != nil || resp.Text != "ok" || text != "ok" || resp.FinishReason != FinishStop {
			t.Errorf("%s: rehearsal = %+v, %v (streamed %q), want ok", provider, resp, err, text)
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("%s: a rehearsal sent %d request(s)", provider, n)
		}
		m.(Warmer).Warm(t.Context())
		m.(Warmer).Warm(t.Context())
		if n := requests.Load(); n != 1 {
			t.Errorf("%s: two warm-ups sent %d request(s), want the one GET", provider, n)
		}
		requests.Store(0)
		hostUse.Delete(srv.URL)
		hostUse.Delete(srv.URL + "/v1")
	}
}

// TestSummaryFramed: every provider hands the model a compaction summary
// after the frame that presents it as context handed over, not as the
// user's request; other user messages go as they are.
func TestSummaryFramed(t *testing.T) {
	msgs := []history.Message{
		{Role: history.RoleSystem, Content: "sys"},
		{Role: history.RoleUser, Content: "the summary", Summary: true},
		{Role: history.RoleUser, Content: "go on"},
	}
	text := func(mc llms.MessageContent) string { return mc.Parts[0].(llms.TextContent).Text }
	for name, out := range map[string][]llms.MessageContent{
		"openai": langchainMessages(msgs, imageURL), "anthropic": anthropicMessages(msgs), "ollama": ollamaMessages(msgs),
	} {
		if got := text(out[1]); got != history.SummaryFrame+"the summary" {
			t.Errorf("%s: the summary reads %q", name, got)
		}
		if got := text(out[2]); got != "go on" {
			t.Errorf("%s: a user message reads %q", name, got)
		}
	}
}
