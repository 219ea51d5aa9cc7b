package llm_test

import (
	"net/http"
	"testing"

	"github.com/mm-agent/mm/llm"
)

func TestProbeLlamaCpp(t *testing.T) {
	srv := fixture(t)
	cfg := llm.Config{Provider: llm.ProviderOpenAI, BaseURL: srv.URL()}
	if n := llm.ProbeContextWindow(t.Context(), cfg); n != 8192 {
		t.Errorf("default window %d, want 8192", n)
	}
	srv.SetContextWindow(32768)
	if n := llm.ProbeContextWindow(t.Context(), cfg); n != 32768 {
		t.Errorf("window %d, want 32768", n)
	}

	topLevel := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"n_ctx":4096}`))
	})
	cfg.BaseURL = topLevel.URL + "/v1/"
	if n := llm.ProbeContextWindow(t.Context(), cfg); n != 4096 {
		t.Errorf("top-level n_ctx: %d, want 4096", n)
	}
}

func TestProbeOllama(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/show" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"model_info":{"general.architecture":"qwen2","qwen2.block_count":28,"qwen2.context_length":32768}}`))
	})
	if n := llm.ProbeContextWindow(t.Context(), llm.Config{Provider: llm.ProviderOllama, BaseURL: srv.URL, Name: "qwen2.5"}); n != 32768 {
		t.Errorf("window %d, want 32768", n)
	}
	if sent, _ := srv.last(); sent["model"] != "qwen2.5" {
		t.Errorf("asked about %v, want qwen2.5", sent["model"])
	}
}

func TestProbeFailuresAreZero(t *testing.T) {
	notFound := newRecorder(t, http.NotFound)
	for name, cfg := range map[string]llm.Config{
		"scripted":       {Provider: llm.ProviderScripted},
		"anthropic":      {Provider: llm.ProviderAnthropic, BaseURL: notFound.URL},
		"no server":      {Provider: llm.ProviderOpenAI, BaseURL: closedPortURL(t)},
		"no /props":      {Provider: llm.ProviderOpenAI, BaseURL: notFound.URL + "/v1"},
		"public openai":  {Provider: llm.ProviderOpenAI},
		"ollama no show": {Provider: llm.ProviderOllama, BaseURL: notFound.URL, Name: "m"},
	} {
		if n := llm.ProbeContextWindow(t.Context(), cfg); n != 0 {
			t.Errorf("%s: %d, want 0", name, n)
		}
	}
}
