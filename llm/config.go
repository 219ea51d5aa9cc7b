package llm

import (
	"fmt"
	"strings"
	"time"
)

// The provider names Config.Provider accepts.
const (
	ProviderOpenAI    = "openai"
	ProviderOllama    = "ollama"
	ProviderAnthropic = "anthropic"
	ProviderScripted  = "scripted"
)

// Config selects and configures one model.
type Config struct {
	Provider string // ProviderOpenAI, ProviderOllama, ProviderAnthropic or ProviderScripted
	// BaseURL is the server's API root, e.g. http://127.0.0.1:8080/v1 for
	// llama-server or http://127.0.0.1:11434 for Ollama. Empty means the
	// provider's public endpoint (OpenAI, Anthropic) or Ollama's local default.
	BaseURL string
	Name    string // model name
	APIKey  string // already resolved from the environment; may be empty
	// Temperature applies when a Request leaves its own negative; a negative
	// value here too leaves the server's default in force.
	Temperature float64
	// MaxTokens applies when a Request leaves its own at 0; 0 here too leaves
	// the server's default in force.
	MaxTokens int
	// Script is the scripted provider's YAML script; "" means DefaultScript.
	Script string
	// IdleTimeout ends a call that receives nothing (no response header,
	// no byte of the stream) for this long, with an ErrServer error naming
	// it; 0 means never. Only the server's silence counts: not the time
	// the caller's emit takes, nor a retry wait.
	IdleTimeout time.Duration
	// Retries is how many times a request the server refuses before
	// streaming anything (HTTP 429, 502, 503, 529, connection refused) is
	// sent again; each wait is announced as a DeltaNotice.
	Retries int
	// RetryBackoff is the first wait without a Retry-After; each next one
	// doubles, with jitter. 0 means one second.
	RetryBackoff time.Duration
}

// New builds the model c describes. It does not contact the server: a wrong
// address or key shows up as an ErrServer error on the first call.
func New(c Config) (Model, error) {
	switch c.Provider {
	case ProviderOpenAI:
		return newOpenAI(c)
	case ProviderOllama:
		return newOllama(c)
	case ProviderAnthropic:
		return newAnthropic(c)
	case ProviderScripted:
		return newScripted(c)
	default:
		return nil, fmt.Errorf("llm: unknown provider %q (want %s, %s, %s or %s)",
			c.Provider, ProviderOpenAI, ProviderOllama, ProviderAnthropic, ProviderScripted)
	}
}

// placeholderKey stands in for a missing API key. langchaingo's clients
// refuse to start without one, yet local servers (llama-server, vLLM, LM
// Studio) need none; a server that does need one answers HTTP 401, which
// reaches the user as a clear one-line error.
const placeholderKey = "sk-no-key"

func (c Config) apiKey() string {
	if c.APIKey == "" {
		return placeholderKey
	}
	return c.APIKey
}

// baseURL returns c.BaseURL without a trailing slash, or fallback when empty.
func (c Config) baseURL(fallback string) string {
	if u := strings.TrimRight(c.BaseURL, "/"); u != "" {
		return u
	}
	return fallback
}

// temperature resolves the temperature of one call: the request's if set,
// else the configuration's; negative means the server's default.
func (c Config) temperature(req Request) float64 {
	if req.Temperature >= 0 {
		return req.Temperature
	}
	return c.Temperature
}

// maxTokens resolves the output limit of one call the same way; 0 means the
// server's default.
func (c Config) maxTokens(req Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return max(c.MaxTokens, 0)
}
