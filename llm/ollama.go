package llm

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/ollama"

	"github.com/mm-agent/mm/history"
)

const ollamaDefaultURL = "http://127.0.0.1:11434"

// ollamaModel talks to Ollama's native chat API. langchaingo's Ollama client
// (v0.1.14) carries text only: it can neither offer tools nor return tool
// calls, so Request.Tools is ignored and past tool calls are shown to the
// model as text. For tool use, point the openai provider at Ollama's
// OpenAI-compatible endpoint (<ollama>/v1) instead.
type ollamaModel struct {
	cfg     Config
	llm     *ollama.LLM
	baseURL string
	// rehearsal runs once, at the first warm-up (warm.go).
	rehearsal sync.Once
}

// ollamaBase is the server root: Ollama's native API lives beside, not
// under, its OpenAI-compatible /v1, which users often paste.
func ollamaBase(c Config) string {
	return strings.TrimSuffix(c.baseURL(ollamaDefaultURL), "/v1")
}

func newOllama(c Config) (Model, error) {
	base := ollamaBase(c)
	// ollama.WithServerURL calls log.Fatal on a bad URL, so check it first.
	if u, err := url.Parse(base); err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("llm: ollama: invalid base URL %q", base)
	}
	g := &guard{baseURL: base, local: isLoopback(base), start: "`ollama serve`", finished: ollamaFinished, temperaturePath: "options.temperature",
		lineLimit: ollamaLineLimit, split: splitOllama,
		canned: ollamaCanned, cannedType: "application/x-ndjson"}
	client, err := ollama.New(
		ollama.WithServerURL(base),
		ollama.WithModel(c.Name),
		ollama.WithHTTPClient(newHTTPClient(g)),
	)
	if err != nil {
		return nil, fmt.Errorf("llm: ollama: %w", err)
	}
	return &ollamaModel{cfg: c, llm: client, baseURL: base}, nil
}

func (m *ollamaModel) Stream(ctx context.Context, req Request, emit func(Delta)) (Response, error) {
	temperature := m.cfg.temperature(req)
	ctx, c := beginCall(ctx, m.cfg, temperature < 0)
	defer c.end()
	// The time emit takes is the caller's, not the server's silence.
	emit = c.consumer(emit)
	// langchaingo makes its request on this goroutine, so notices can go
	// straight to emit.
	c.notify = func(text string) { emit(Delta{Kind: DeltaNotice, Text: text}) }
	opts := []llms.CallOption{llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
		if len(chunk) > 0 {
			emit(Delta{Kind: DeltaText, Text: string(chunk)})
		}
		return nil
	})}
	if temperature >= 0 {
		opts = append(opts, llms.WithTemperature(temperature))
	}
	if n := m.cfg.maxTokens(req); n > 0 {
		opts = append(opts, llms.WithMaxTokens(n))
	}
	resp, err := m.llm.GenerateContent(ctx, ollamaMessages(req.Messages), opts...)
	if err := c.result(err, m.baseURL); err != nil {
		return Response{}, err
	}
	choice := resp.Choices[0]
	return Response{
		Text:         choice.Content,
		Usage:        usageFrom(choice.GenerationInfo, usageKeys{input: "PromptTokens", output: "CompletionTokens"}),
		FinishReason: FinishStop,
	}, nil
}

// Warm opens a pooled connection with GET <root>/api/version, Ollama's
// cheapest endpoint.
func (m *ollamaModel) Warm(ctx context.Context) {
	warm(ctx, m.baseURL, m.baseURL+"/api/version", nil)
	m.rehearsal.Do(func() { rehearse(ctx, m) })
}

// ollamaMessages converts a history to text-only messages, writing past
// tool calls into the assistant's text so the model still sees them.
func ollamaMessages(msgs []history.Message) []llms.MessageContent {
	out := make([]llms.MessageContent, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		role := llms.ChatMessageTypeHuman
		text := history.ModelText(m) // a summary framed as context
		switch m.Role {
		case history.RoleSystem:
			role = llms.ChatMessageTypeSystem
		case history.RoleAssistant:
			role = llms.ChatMessageTypeAI
			for _, tc := range m.ToolCalls {
				text += fmt.Sprintf("\n[called tool %s with %s]", tc.Name, argumentsOrEmpty(tc.Arguments))
			}
		case history.RoleTool:
			role = llms.ChatMessageTypeTool
		}
		mc := llms.TextParts(role, text)
		for _, im := range m.Images {
			mc.Parts = append(mc.Parts, imageBinary(im))
		}
		out = append(out, mc)
	}
	return out
}
