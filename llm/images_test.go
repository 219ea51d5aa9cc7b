package llm_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

// pixel is a 1×1 PNG, base64.
const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

var withImage = []history.Message{
	{Role: history.RoleSystem, Content: "sys"},
	{Role: history.RoleUser, Content: "what is this?", Images: []history.Image{{MIMEType: "image/png", Data: pixel}}},
}

// lastUser is the JSON of the last message sent, its content included.
func lastUser(t *testing.T, sent map[string]any) string {
	t.Helper()
	msgs, _ := sent["messages"].([]any)
	if len(msgs) == 0 {
		t.Fatalf("no messages sent: %v", sent)
	}
	b, _ := json.Marshal(msgs[len(msgs)-1])
	return string(b)
}

// TestImagesReachEveryProvider: a user message's image travels as each
// API wants it, after the text: an image_url data URL (OpenAI), an image
// block with base64 source (Anthropic), the images list (Ollama).
func TestImagesReachEveryProvider(t *testing.T) {
	t.Run("openai", func(t *testing.T) {
		srv := fixture(t)
		if got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: withImage, Temperature: -1}); got.err != nil {
			t.Fatal(got.err)
		}
		if u := lastUser(t, srv.LastRequest()); !strings.Contains(u, `"text":"what is this?"`) || !strings.Contains(u, `"url":"data:image/png;base64,`+pixel+`"`) {
			t.Errorf("sent %s", u)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			flushLines(w, "text/event-stream", anthropicStream...)
		})
		m, err := llm.New(llm.Config{Provider: llm.ProviderAnthropic, BaseURL: srv.URL + "/v1", Name: "claude-test", Temperature: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := stream(t.Context(), m, llm.Request{Messages: withImage, Temperature: -1}); got.err != nil {
			t.Fatal(got.err)
		}
		sent, _ := srv.last()
		if u := lastUser(t, sent); !strings.Contains(u, `"type":"image"`) || !strings.Contains(u, `"data":"`+pixel+`"`) || !strings.Contains(u, `"media_type":"image/png"`) {
			t.Errorf("sent %s", u)
		}
	})
	t.Run("ollama", func(t *testing.T) {
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			flushLines(w, "application/x-ndjson",
				`{"model":"m","message":{"role":"assistant","content":"A pixel."},"done":false}`,
				`{"model":"m","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":3,"eval_count":2}`)
		})
		m, err := llm.New(llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL, Name: "llava", Temperature: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := stream(t.Context(), m, llm.Request{Messages: withImage, Temperature: -1}); got.err != nil {
			t.Fatal(got.err)
		}
		sent, _ := srv.last()
		if u := lastUser(t, sent); !strings.Contains(u, `"images":["`+pixel+`"]`) || !strings.Contains(u, `"content":"what is this?"`) {
			t.Errorf("sent %s", u)
		}
	})
}

// TestImagesCountAsTokens: an image counts ImageTokens, not its base64.
func TestImagesCountAsTokens(t *testing.T) {
	text := llm.EstimateTokens([]history.Message{{Role: history.RoleUser, Content: "what is this?"}})
	if got := llm.EstimateTokens(withImage[1:]); got != text+history.ImageTokens {
		t.Errorf("%d tokens, want %d", got, text+history.ImageTokens)
	}
}
