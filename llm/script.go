package llm

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mm-agent/mm/history"
)

// defaultScriptYAML answers "ping" with "pong" and echoes anything else.
//
//go:embed scripted_default.yaml
var defaultScriptYAML []byte

// The templates a step's text may hold.
const (
	tmplToolOutput = "{{last_tool_output}}" // content of the last tool message
	tmplUserText   = "{{last_user_text}}"   // text of the last user message
)

// Script is a parsed model script: it decides, from the request messages
// alone, how the scripted model answers. Being stateless, one Script serves
// any number of concurrent sessions; it is immutable once parsed.
type Script struct {
	rules    []rule
	fallback rule
	usage    bool
}

type rule struct {
	match *regexp.Regexp // nil for the fallback rule
	steps []scriptStep
}

type scriptStep struct {
	Step
	templated bool // Text holds a template to expand per request
}

// Step is one scripted answer, as Answer resolves it for a request: the
// script's global latency and token rate are applied, templates expanded and
// tool-call ids assigned.
type Step struct {
	Text      string
	Reasoning string
	ToolCalls []history.ToolCall
	// Error, when set, makes the call fail with this message (the HTTP
	// fixture answers HTTP 500 with it).
	Error string
	// Garbage makes the call fail with a malformed stream.
	Garbage bool
	// Stall streams the first word of Text and then nothing more, until
	// the idle timeout (Config.IdleTimeout) or the caller ends the call: a
	// server that hangs mid-answer.
	Stall bool
	// Truncate streams Text and then ends without a finish: a server that
	// dies mid-answer. The call fails as ended early.
	Truncate     bool
	Finish       string        // FinishStop, FinishLength or FinishToolCalls
	Latency      time.Duration // time to first token
	TokensPerSec float64       // streaming rate; 0 streams at once
	Sleep        time.Duration // stall before answering
	Usage        *Usage        // nil when the script does not report usage
}

// The YAML shapes of a script; ParseScript documents them.
type scriptFile struct {
	Rules        []ruleFile    `yaml:"rules"`
	Default      *ruleFile     `yaml:"default"`
	Latency      time.Duration `yaml:"latency"`
	TokensPerSec float64       `yaml:"tokensPerSec"`
	Usage        bool          `yaml:"usage"`
}

type ruleFile struct {
	Match string     `yaml:"match"`
	Steps []stepFile `yaml:"steps"`
}

type stepFile struct {
	Text      string `yaml:"text"`
	Reasoning string `yaml:"reasoning"`
	ToolCalls []struct {
		Name string         `yaml:"name"`
		Args map[string]any `yaml:"args"`
	} `yaml:"toolCalls"`
	Error        string         `yaml:"error"`
	Garbage      bool           `yaml:"garbage"`
	Stall        bool           `yaml:"stall"`
	Truncate     bool           `yaml:"truncate"`
	Finish       string         `yaml:"finish"`
	Latency      *time.Duration `yaml:"latency"`
	TokensPerSec *float64       `yaml:"tokensPerSec"`
	Sleep        time.Duration  `yaml:"sleep"`
}

// ParseScript parses a YAML script. docs/scripted-model.md is the user's
// guide to the format; in short:
//
//	rules:                      # tried in order against the last user message
//	  - match: "^ping$"         # Go regexp
//	    steps:                  # step i answers the i-th model call of the turn
//	      - text: "pong"
//	  - match: "run it"
//	    steps:
//	      - text: "Let me run it."
//	        reasoning: "thinking..."     # streamed before the text
//	        toolCalls:
//	          - name: bash
//	            args: {command: "echo hi"} # sent as JSON arguments
//	      - text: "Done: {{last_tool_output}}"
//	  - match: "fail"
//	    steps: [{error: "boom"}]         # the call fails with ErrServer
//	  - match: "garbage"
//	    steps: [{garbage: true}]         # the call fails with a malformed stream
//	  - match: "stuck"
//	    steps: [{text: "Let me", stall: true}]     # streams "Let", then nothing more
//	  - match: "cut"
//	    steps: [{text: "Half an", truncate: true}] # streams the text, ends without a finish
//	  - match: "long"
//	    steps: [{text: "a b c", finish: length}]
//	default:                    # when no rule matches (steps only); built in: echo
//	  steps: [{text: "You said: {{last_user_text}}"}]
//	latency: 0ms                # time to first token
//	tokensPerSec: 0             # 0 = instant; a token is one word with its leading whitespace
//	usage: true                 # report usage (input: chars/4 of all messages; output: words)
//
// The i-th model call of a turn is the one made after i assistant messages
// follow the last user message; past the last step the answer is empty text
// with finish "stop". A step may override latency and tokensPerSec, and may
// add sleep, a stall before answering that a cancelled context cuts short.
// A stall step hangs after its first word until the caller gives up (the
// idle timeout, a cancel); a truncate step fails, after its text, as a
// stream that ended early. The idle timeout (Config.IdleTimeout, or the
// HTTP client's) counts silence as it does for a server: the sleep and
// latency before the first word, and every gap between two words.
// Durations are Go duration strings ("250ms", "30s"). Unknown keys are
// errors, so that a misspelt key does not silently do nothing.
func ParseScript(data []byte) (*Script, error) {
	var f scriptFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("llm: script: %w", err)
	}
	if f.Latency < 0 || f.TokensPerSec < 0 {
		return nil, errors.New("llm: script: latency and tokensPerSec must not be negative")
	}
	s := &Script{usage: f.Usage}
	for i, rf := range f.Rules {
		re, err := regexp.Compile(rf.Match)
		if err != nil {
			return nil, fmt.Errorf("llm: script: rule %d: %w", i+1, err)
		}
		r, err := f.compileRule(re, rf)
		if err != nil {
			return nil, fmt.Errorf("llm: script: rule %d (%q): %w", i+1, rf.Match, err)
		}
		s.rules = append(s.rules, r)
	}
	fallback := ruleFile{Steps: []stepFile{{Text: "You said: " + tmplUserText}}}
	if f.Default != nil {
		// The default shares a rule's shape, yet is never matched: a
		// match there would silently do nothing.
		if f.Default.Match != "" {
			return nil, errors.New("llm: script: default: match is not used (the default answers when no rule matches); move it to a rule")
		}
		fallback = *f.Default
	}
	r, err := f.compileRule(nil, fallback)
	if err != nil {
		return nil, fmt.Errorf("llm: script: default: %w", err)
	}
	s.fallback = r
	return s, nil
}

// LoadScript reads and parses the script file at path.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llm: script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return s, nil
}

// DefaultScript is the embedded script: "ping" gets "pong", anything else
// is echoed back as "You said: ...".
func DefaultScript() *Script { return defaultScript() }

// defaultScript parses the embedded script once; the tests parse it too, so
// a broken one fails them rather than a user.
var defaultScript = sync.OnceValue(func() *Script {
	s, err := ParseScript(defaultScriptYAML)
	if err != nil {
		panic("llm: embedded default script: " + err.Error())
	}
	return s
})

// compileRule resolves a rule's steps against the script's global settings.
func (f *scriptFile) compileRule(re *regexp.Regexp, rf ruleFile) (rule, error) {
	r := rule{match: re, steps: make([]scriptStep, len(rf.Steps))}
	for i, sf := range rf.Steps {
		st, err := f.compileStep(sf)
		if err != nil {
			return rule{}, fmt.Errorf("step %d: %w", i+1, err)
		}
		r.steps[i] = st
	}
	return r, nil
}

func (f *scriptFile) compileStep(sf stepFile) (scriptStep, error) {
	st := Step{
		Text:         sf.Text,
		Reasoning:    sf.Reasoning,
		Error:        sf.Error,
		Garbage:      sf.Garbage,
		Stall:        sf.Stall,
		Truncate:     sf.Truncate,
		Finish:       sf.Finish,
		Latency:      f.Latency,
		TokensPerSec: f.TokensPerSec,
		Sleep:        sf.Sleep,
	}
	if sf.Latency != nil {
		st.Latency = *sf.Latency
	}
	if sf.TokensPerSec != nil {
		st.TokensPerSec = *sf.TokensPerSec
	}
	if st.Latency < 0 || st.TokensPerSec < 0 || st.Sleep < 0 {
		return scriptStep{}, errors.New("latency, tokensPerSec and sleep must not be negative")
	}
	if st.Stall && st.Truncate {
		return scriptStep{}, errors.New("a step cannot both stall and truncate")
	}
	for _, tc := range sf.ToolCalls {
		if tc.Name == "" {
			return scriptStep{}, errors.New("a tool call needs a name")
		}
		args := []byte("{}")
		if tc.Args != nil {
			var err error
			if args, err = json.Marshal(tc.Args); err != nil {
				return scriptStep{}, fmt.Errorf("tool call %s: %w", tc.Name, err)
			}
		}
		st.ToolCalls = append(st.ToolCalls, history.ToolCall{Name: tc.Name, Arguments: string(args)})
	}
	switch st.Finish {
	case "":
		st.Finish = FinishStop
		if len(st.ToolCalls) > 0 {
			st.Finish = FinishToolCalls
		}
	case FinishStop, FinishLength, FinishToolCalls:
	default:
		return scriptStep{}, fmt.Errorf("finish %q: want %s, %s or %s", st.Finish, FinishStop, FinishLength, FinishToolCalls)
	}
	return scriptStep{Step: st, templated: strings.Contains(st.Text, "{{")}, nil
}

// Answer returns the step that answers msgs: the first rule matching the
// last user message (summaries of /compact excepted) picks the steps, and
// the number of assistant messages after that message picks the step.
func (s *Script) Answer(msgs []history.Message) Step {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == history.RoleUser && !msgs[i].Summary {
			last = i
			break
		}
	}
	userText := ""
	if last >= 0 {
		userText = msgs[last].Content
	}
	calls := 0
	for i := last + 1; i < len(msgs); i++ {
		if msgs[i].Role == history.RoleAssistant {
			calls++
		}
	}

	r := s.ruleFor(userText)
	st := Step{Finish: FinishStop}
	if calls < len(r.steps) {
		ss := &r.steps[calls]
		st = ss.Step
		if ss.templated {
			st.Text = expand(st.Text, msgs, userText)
		}
		if len(st.ToolCalls) > 0 {
			st.ToolCalls = withIDs(st.ToolCalls, len(msgs))
		}
	}
	if s.usage {
		st.Usage = stepUsage(&st, msgs)
	}
	return st
}

func (s *Script) ruleFor(userText string) *rule {
	for i := range s.rules {
		if s.rules[i].match.MatchString(userText) {
			return &s.rules[i]
		}
	}
	return &s.fallback
}

func expand(text string, msgs []history.Message, userText string) string {
	if strings.Contains(text, tmplToolOutput) {
		toolOutput := ""
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == history.RoleTool {
				toolOutput = msgs[i].Content
				break
			}
		}
		text = strings.ReplaceAll(text, tmplToolOutput, toolOutput)
	}
	return strings.ReplaceAll(text, tmplUserText, userText)
}

// withIDs copies calls with ids "call_<history length>_<index>": stable for a
// given request, yet distinct across the calls of one conversation, since
// the history only grows between them.
func withIDs(calls []history.ToolCall, historyLen int) []history.ToolCall {
	out := make([]history.ToolCall, len(calls))
	prefix := "call_" + strconv.Itoa(historyLen) + "_"
	for i, tc := range calls {
		tc.ID = prefix + strconv.Itoa(i)
		out[i] = tc
	}
	return out
}

func stepUsage(st *Step, msgs []history.Message) *Usage {
	thought := countWords(st.Reasoning)
	out := countWords(st.Text) + thought
	for _, tc := range st.ToolCalls {
		out += (len(tc.Name) + len(tc.Arguments) + 3) / 4
	}
	return &Usage{InputTokens: EstimateTokens(msgs), OutputTokens: out, ThoughtTokens: thought}
}
