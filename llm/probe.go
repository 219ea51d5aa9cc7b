package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// probeTimeout bounds a context-window probe: it runs at startup, and a
// server that is slow to say is better skipped (the configured window or
// the default applies).
const probeTimeout = 2 * time.Second

// ProbeContextWindow asks the server how many tokens its context window
// holds: llama.cpp's GET /props for the openai provider, POST /api/show for
// Ollama. It returns 0 when the provider has no such probe (anthropic,
// scripted), when no server is configured, and on any failure.
func ProbeContextWindow(ctx context.Context, c Config) int {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	switch c.Provider {
	case ProviderOpenAI:
		if c.BaseURL == "" {
			return 0
		}
		return probeLlamaCpp(ctx, strings.TrimSuffix(c.baseURL(""), "/v1"))
	case ProviderOllama:
		return probeOllama(ctx, ollamaBase(c), c.Name)
	default:
		return 0
	}
}

// probeLlamaCpp reads n_ctx from llama-server's /props: under
// default_generation_settings in current versions, at the top in some older
// ones and in forks.
func probeLlamaCpp(ctx context.Context, root string) int {
	var props struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		NCtx int `json:"n_ctx"`
	}
	if !probeJSON(ctx, http.MethodGet, root+"/props", nil, &props) {
		return 0
	}
	return max(props.Settings.NCtx, props.NCtx, 0)
}

// probeOllama reads the model's "<architecture>.context_length" from
// /api/show. That is the window the model was trained for; Ollama may run
// it with a smaller num_ctx of its own.
func probeOllama(ctx context.Context, root, model string) int {
	body, err := json.Marshal(map[string]string{"model": model})
	if err != nil {
		return 0
	}
	var show struct {
		ModelInfo map[string]any `json:"model_info"`
	}
	if !probeJSON(ctx, http.MethodPost, root+"/api/show", body, &show) {
		return 0
	}
	for k, v := range show.ModelInfo {
		if n, ok := v.(float64); ok && strings.HasSuffix(k, ".context_length") {
			return int(n)
		}
	}
	return 0
}

// probeJSON makes one request and decodes a 200 answer into out.
func probeJSON(ctx context.Context, method, url string, body []byte, out any) bool {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := sharedTransport().RoundTrip(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out) == nil
}
