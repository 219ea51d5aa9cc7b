package llm

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/tmc/langchaingo/llms"

	"github.com/mm-agent/mm/history"
)

// This file converts between this package's types and langchaingo's, for
// the providers built on it.

// emptySchema stands in for a tool without parameters: servers reject a
// function whose parameters are null.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func langchainTools(defs []ToolDef) []llms.Tool {
	tools := make([]llms.Tool, len(defs))
	for i, d := range defs {
		params := d.Parameters
		if len(params) == 0 {
			params = emptySchema
		}
		tools[i] = llms.Tool{
			Type: "function",
			Function: &llms.FunctionDefinition{
				Name:        d.Name,
				Description: d.Description,
				Parameters:  params,
			},
		}
	}
	return tools
}

// langchainMessages converts a history to langchaingo's OpenAI-shaped form:
// an assistant message carries its text and tool calls together, and each
// tool result is its own message answering a call id. A user message's
// images follow its text, each as image makes it: the providers' clients
// take different part types.
func langchainMessages(msgs []history.Message, image func(history.Image) llms.ContentPart) []llms.MessageContent {
	out := make([]llms.MessageContent, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case history.RoleSystem:
			out = append(out, llms.TextParts(llms.ChatMessageTypeSystem, m.Content))
		case history.RoleAssistant:
			parts := make([]llms.ContentPart, 0, 1+len(m.ToolCalls))
			if m.Content != "" || len(m.ToolCalls) == 0 {
				parts = append(parts, llms.TextContent{Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				parts = append(parts, llms.ToolCall{
					ID:           tc.ID,
					Type:         "function",
					FunctionCall: &llms.FunctionCall{Name: tc.Name, Arguments: argumentsOrEmpty(tc.Arguments)},
				})
			}
			out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeAI, Parts: parts})
		case history.RoleTool:
			out = append(out, llms.MessageContent{
				Role:  llms.ChatMessageTypeTool,
				Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: m.ToolCallID, Name: m.Name, Content: m.Content}},
			})
		default: // RoleUser, summaries included
			out = append(out, userMessage(m, image))
		}
	}
	return out
}

// userMessage is a user message's text, then its images; a compaction
// summary is framed as context handed over (history.ModelText).
func userMessage(m *history.Message, image func(history.Image) llms.ContentPart) llms.MessageContent {
	mc := llms.TextParts(llms.ChatMessageTypeHuman, history.ModelText(m))
	for _, im := range m.Images {
		mc.Parts = append(mc.Parts, image(im))
	}
	return mc
}

// imageURL is an image as OpenAI-compatible servers take it.
func imageURL(im history.Image) llms.ContentPart {
	return llms.ImageURLContent{URL: "data:" + im.MIMEType + ";base64," + im.Data}
}

// imageBinary is an image as langchaingo's Anthropic and Ollama clients
// take it.
func imageBinary(im history.Image) llms.ContentPart {
	return llms.BinaryContent{MIMEType: im.MIMEType, Data: imageBytes(im)}
}

// imageBytes is the decoded image (the clients encode it again); nil if
// Data is not base64.
func imageBytes(im history.Image) []byte {
	b, err := base64.StdEncoding.DecodeString(im.Data)
	if err != nil {
		return nil
	}
	return b
}

// argumentsOrEmpty replaces empty arguments with an empty object: servers
// that parse them (llama.cpp's chat templates, Anthropic) reject "".
func argumentsOrEmpty(args string) string {
	if strings.TrimSpace(args) == "" {
		return "{}"
	}
	return args
}

// toolCallsFrom converts langchaingo's assembled tool calls, dropping any
// without a name: they are stray argument fragments a server sent without
// the call they belong to, which no tool could run.
func toolCallsFrom(calls []llms.ToolCall) []history.ToolCall {
	var out []history.ToolCall
	for _, tc := range calls {
		if tc.FunctionCall == nil || tc.FunctionCall.Name == "" {
			continue
		}
		out = append(out, history.ToolCall{ID: tc.ID, Name: tc.FunctionCall.Name, Arguments: argumentsOrEmpty(tc.FunctionCall.Arguments)})
	}
	return out
}

// usageKeys names the GenerationInfo entries a provider reports usage in;
// an empty name means the provider does not report that figure.
type usageKeys struct {
	input, output, thought, cachedRead string
}

// usageFrom reads usage from GenerationInfo, nil when nothing was reported.
func usageFrom(info map[string]any, k usageKeys) *Usage {
	intOf := func(key string) int {
		n, _ := info[key].(int)
		return n
	}
	u := Usage{
		InputTokens:      intOf(k.input),
		OutputTokens:     intOf(k.output),
		ThoughtTokens:    intOf(k.thought),
		CachedReadTokens: intOf(k.cachedRead),
	}
	if u == (Usage{}) {
		return nil
	}
	return &u
}

// finishReason normalises a provider's stop reason. Tool calls win whatever
// the server said, since they are what the caller must act on.
func finishReason(stop string, hasToolCalls bool) string {
	switch {
	case hasToolCalls:
		return FinishToolCalls
	case stop == "length" || stop == "max_tokens":
		return FinishLength
	default:
		return FinishStop
	}
}
