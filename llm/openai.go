package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

const openAIBaseURL = "https://api.openai.com/v1"

// openAIModel talks to any OpenAI-compatible chat completions server.
type openAIModel struct {
	cfg     Config
	llm     *openai.LLM
	baseURL string
	// legacyMaxTokens sends the output limit as max_tokens, which every
	// local server understands, rather than max_completion_tokens, which
	// only OpenAI itself requires (for its reasoning models).
	legacyMaxTokens bool
	// rehearsal runs once, at the first warm-up (warm.go).
	rehearsal sync.Once
}

func newOpenAI(c Config) (Model, error) {
	base := c.baseURL(openAIBaseURL)
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("llm: openai: invalid base URL %q", base)
	}
	g := &guard{baseURL: base, local: isLoopback(base), start: "for example `llama-server -m MODEL.gguf --port PORT`", sse: true, finished: openAIFinished, temperaturePath: "temperature",
		lineLimit: sseLineLimit, split: splitOpenAI,
		canned: openAICanned, cannedType: "text/event-stream"}
	client, err := openai.New(
		openai.WithToken(c.apiKey()),
		openai.WithBaseURL(base),
		openai.WithModel(c.Name),
		openai.WithHTTPClient(newHTTPClient(g)),
	)
	if err != nil {
		return nil, fmt.Errorf("llm: openai: %w", err)
	}
	return &openAIModel{
		cfg:             c,
		llm:             client,
		baseURL:         base,
		legacyMaxTokens: u.Hostname() != "api.openai.com",
	}, nil
}

func (m *openAIModel) Stream(ctx context.Context, req Request, emit func(Delta)) (Response, error) {
	temperature := m.cfg.temperature(req)
	ctx, c := beginCall(ctx, m.cfg, temperature < 0)
	defer c.end()
	// The time emit takes is the caller's, not the server's silence.
	emit = c.consumer(emit)
	// langchaingo makes its request on this goroutine, so notices can go
	// straight to emit.
	c.notify = func(text string) { emit(Delta{Kind: DeltaNotice, Text: text}) }

	// sent is the text forwarded so far, to make up at the end for content
	// that arrived in the same delta as a tool-call fragment (see below).
	var sent strings.Builder
	onChunk := func(_ context.Context, reasoning, chunk []byte) error {
		if len(reasoning) > 0 {
			emit(Delta{Kind: DeltaReasoning, Text: string(reasoning)})
		}
		if len(chunk) > 0 && !isToolCallChunk(chunk) {
			sent.Write(chunk)
			emit(Delta{Kind: DeltaText, Text: string(chunk)})
		}
		return nil
	}
	opts := []llms.CallOption{llms.WithStreamingReasoningFunc(onChunk)}
	if len(req.Tools) > 0 && !req.ToolsOff {
		opts = append(opts, llms.WithTools(langchainTools(req.Tools)))
	}
	if temperature >= 0 {
		opts = append(opts, llms.WithTemperature(temperature))
	}
	if n := m.cfg.maxTokens(req); n > 0 {
		opts = append(opts, llms.WithMaxTokens(n))
		if m.legacyMaxTokens {
			opts = append(opts, openai.WithLegacyMaxTokensField())
		}
	}

	resp, err := m.llm.GenerateContent(ctx, langchainMessages(req.Messages, imageURL), opts...)
	if err := c.result(err, m.baseURL); err != nil {
		return Response{}, err
	}
	choice := resp.Choices[0]
	out := Response{
		Text:      choice.Content,
		Reasoning: choice.ReasoningContent,
		ToolCalls: toolCallsFrom(choice.ToolCalls),
		Usage: usageFrom(choice.GenerationInfo, usageKeys{
			input:      "PromptTokens",
			output:     "CompletionTokens",
			thought:    "ReasoningTokens",
			cachedRead: "PromptCachedTokens",
		}),
	}
	out.FinishReason = finishReason(choice.StopReason, len(out.ToolCalls) > 0)
	if rest, ok := strings.CutPrefix(out.Text, sent.String()); ok && rest != "" {
		emit(Delta{Kind: DeltaText, Text: rest})
	}
	return out, nil
}

// Warm opens a pooled connection with GET <base>/models, which every
// OpenAI-compatible server answers (its status does not matter).
func (m *openAIModel) Warm(ctx context.Context) {
	warm(ctx, m.baseURL, m.baseURL+"/models", http.Header{"Authorization": {"Bearer " + m.cfg.apiKey()}})
	m.rehearsal.Do(func() { rehearse(ctx, m) })
}

// toolCallFragment has the JSON shape of langchaingo's openaiclient.ToolCall.
type toolCallFragment struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function,omitempty"`
}

var (
	toolChunkWithID = []byte(`[{"id":`)
	toolChunkNoID   = []byte(`[{"type":`)
)

// isToolCallChunk tells a tool-call chunk from content. When a streamed delta
// carries tool-call fragments, langchaingo (v0.1.14) hands the streaming
// callback json.Marshal of those fragments in place of the content, and no
// hook gives the bare content. A chunk is taken for tool calls only if it
// re-encodes byte for byte as such fragments: model text never comes out
// exactly as that, while the fragments always do. Content sent in the same
// delta is lost to the callback; Stream makes it up from the final text.
func isToolCallChunk(chunk []byte) bool {
	if !bytes.HasPrefix(chunk, toolChunkWithID) && !bytes.HasPrefix(chunk, toolChunkNoID) {
		return false
	}
	var frags []toolCallFragment
	if json.Unmarshal(chunk, &frags) != nil {
		return false
	}
	again, err := json.Marshal(frags)
	return err == nil && bytes.Equal(again, chunk)
}
