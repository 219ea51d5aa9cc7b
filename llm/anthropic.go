package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"

	"github.com/mm-agent/mm/history"
)

const anthropicBaseURL = "https://api.anthropic.com/v1"

// anthropicModel talks to Anthropic's Messages API.
type anthropicModel struct {
	cfg     Config
	llm     *anthropic.LLM
	baseURL string
	// rehearsal runs once, at the first warm-up (warm.go).
	rehearsal sync.Once
}

func newAnthropic(c Config) (Model, error) {
	base := c.baseURL(anthropicBaseURL)
	g := &guard{baseURL: base, local: isLoopback(base), start: "the proxy that serves this URL", sse: true, finished: anthropicFinished, temperaturePath: "temperature",
		lineLimit: sseLineLimit, split: splitAnthropic, markFailed: markAnthropicErrors,
		canned: anthropicCanned, cannedType: "text/event-stream"}
	client, err := anthropic.New(
		anthropic.WithToken(c.apiKey()),
		anthropic.WithBaseURL(base),
		anthropic.WithModel(c.Name),
		anthropic.WithHTTPClient(newHTTPClient(g)),
	)
	if err != nil {
		return nil, fmt.Errorf("llm: anthropic: %w", err)
	}
	return &anthropicModel{cfg: c, llm: client, baseURL: base}, nil
}

func (m *anthropicModel) Stream(ctx context.Context, req Request, emit func(Delta)) (Response, error) {
	temperature := m.cfg.temperature(req)
	ctx, c := beginCall(ctx, m.cfg, temperature < 0)
	defer c.end()
	c.failed = failedCalls(req.Messages)
	// The time emit takes is the caller's, not the server's silence. relay
	// calls it on this goroutine while langchaingo's reader waits in send,
	// so the hold covers the whole time the caller keeps a delta.
	emit = c.consumer(emit)
	var reasoning strings.Builder
	resp, err := relay(func(d Delta) {
		if d.Kind == DeltaReasoning {
			reasoning.WriteString(d.Text)
		}
		emit(d)
	}, func(send func(Delta) error) (*llms.ContentResponse, error) {
		// The request is made on this goroutine, not the caller's, so its
		// notices travel through send like the deltas. Set before the
		// request starts, the field is only read on this goroutine.
		c.notify = func(text string) { send(Delta{Kind: DeltaNotice, Text: text}) }
		// langchaingo streams only when a text callback is set, and then
		// hands thinking to the reasoning callback with an empty chunk.
		opts := []llms.CallOption{
			llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
				return send(Delta{Kind: DeltaText, Text: string(chunk)})
			}),
			llms.WithStreamingReasoningFunc(func(_ context.Context, thinking, _ []byte) error {
				return send(Delta{Kind: DeltaReasoning, Text: string(thinking)})
			}),
		}
		if len(req.Tools) > 0 {
			opts = append(opts, llms.WithTools(langchainTools(req.Tools)))
		}
		if temperature >= 0 {
			opts = append(opts, llms.WithTemperature(temperature))
		}
		if n := m.cfg.maxTokens(req); n > 0 {
			opts = append(opts, llms.WithMaxTokens(n))
		}
		return m.llm.GenerateContent(ctx, anthropicMessages(req.Messages), opts...)
	})
	if err := c.result(err, m.baseURL); err != nil {
		return Response{}, err
	}
	// langchaingo returns one choice per content block: text, tool use or
	// thinking, each carrying the whole message's usage and stop reason.
	out := Response{Reasoning: reasoning.String()}
	for _, choice := range resp.Choices {
		out.Text += choice.Content
		out.ToolCalls = append(out.ToolCalls, toolCallsFrom(choice.ToolCalls)...)
	}
	first := resp.Choices[0]
	out.Usage = usageFrom(first.GenerationInfo, usageKeys{
		input:      "InputTokens",
		output:     "OutputTokens",
		cachedRead: "CacheReadInputTokens",
	})
	out.FinishReason = finishReason(first.StopReason, len(out.ToolCalls) > 0)
	return out, nil
}

// failedCalls are the ids of the tool calls whose results failed (nil when
// none did).
func failedCalls(msgs []history.Message) map[string]bool {
	var out map[string]bool
	for i := range msgs {
		if m := &msgs[i]; m.Role == history.RoleTool && m.Failed && m.ToolCallID != "" {
			if out == nil {
				out = map[string]bool{}
			}
			out[m.ToolCallID] = true
		}
	}
	return out
}

// markAnthropicErrors sets is_error on the tool_result blocks of the
// failed calls, which langchaingo cannot send: Claude models read a failed
// tool as one, not only from the words of its result. Every other byte of
// the body stays as it was.
func markAnthropicErrors(body []byte, failed map[string]bool) ([]byte, error) {
	var paths []string
	gjson.GetBytes(body, "messages").ForEach(func(i, msg gjson.Result) bool {
		msg.Get("content").ForEach(func(j, block gjson.Result) bool {
			if block.Get("type").String() == "tool_result" && failed[block.Get("tool_use_id").String()] {
				paths = append(paths, fmt.Sprintf("messages.%d.content.%d.is_error", i.Int(), j.Int()))
			}
			return true
		})
		return true
	})
	var err error
	for _, p := range paths {
		if body, err = sjson.SetBytes(body, p, true); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// anthropicVersion is the API version langchaingo's client sends.
const anthropicVersion = "2023-06-01"

// Warm opens a pooled connection with GET <base>/models, authenticated as
// the calls are (its status does not matter).
func (m *anthropicModel) Warm(ctx context.Context) {
	warm(ctx, m.baseURL, m.baseURL+"/models", http.Header{
		"X-Api-Key":         {m.cfg.apiKey()},
		"Anthropic-Version": {anthropicVersion},
	})
	m.rehearsal.Do(func() { rehearse(ctx, m) })
}

// anthropicMessages splits each assistant message into one message per text
// or tool call, because langchaingo sends only an assistant message's first
// part. The API joins consecutive messages of one role, so the server sees
// the original turn; empty text, which it rejects, is left out.
func anthropicMessages(msgs []history.Message) []llms.MessageContent {
	in := langchainMessages(msgs, imageBinary)
	out := make([]llms.MessageContent, 0, len(in))
	for _, mc := range in {
		if mc.Role != llms.ChatMessageTypeAI {
			out = append(out, mc)
			continue
		}
		for _, p := range mc.Parts {
			if t, ok := p.(llms.TextContent); ok && t.Text == "" {
				continue
			}
			out = append(out, llms.MessageContent{Role: mc.Role, Parts: []llms.ContentPart{p}})
		}
	}
	return out
}

// errRelayDone stops a callback that fires after its call has returned.
var errRelayDone = errors.New("llm: stream already finished")

// relay runs generate on its own goroutine and calls emit on the calling
// goroutine, as Model.Stream promises, for each delta generate's callbacks
// send: langchaingo's Anthropic client calls them from its reader goroutine.
func relay(emit func(Delta), generate func(send func(Delta) error) (*llms.ContentResponse, error)) (*llms.ContentResponse, error) {
	type result struct {
		resp *llms.ContentResponse
		err  error
	}
	deltas := make(chan Delta)
	done := make(chan result, 1)
	finished := make(chan struct{})
	defer close(finished)
	send := func(d Delta) error {
		select {
		case deltas <- d:
			return nil
		case <-finished:
			return errRelayDone
		}
	}
	go func() {
		resp, err := generate(send)
		done <- result{resp, err}
	}()
	for {
		select {
		case d := <-deltas:
			emit(d)
		case r := <-done:
			return r.resp, r.err
		}
	}
}
