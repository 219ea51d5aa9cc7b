package llm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
)

func scriptedModel(t testing.TB, yaml string) llm.Model {
	t.Helper()
	cfg := llm.Config{Provider: llm.ProviderScripted}
	if yaml != "" {
		cfg.Script = filepath.Join(t.TempDir(), "script.yaml")
		if err := os.WriteFile(cfg.Script, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestScriptedDefaultScript(t *testing.T) {
	m := scriptedModel(t, "")
	got := stream(t.Context(), m, llm.Request{Messages: user("ping")})
	if got.err != nil || got.resp.Text != "pong" || got.text != "pong" || got.resp.FinishReason != llm.FinishStop {
		t.Errorf("ping: %+v, deltas %q, err %v", got.resp, got.text, got.err)
	}
	if u := got.resp.Usage; u == nil || u.InputTokens == 0 || u.OutputTokens != 1 {
		t.Errorf("usage = %+v, want input > 0 and 1 output token", u)
	}
	got = stream(t.Context(), m, llm.Request{Messages: user("what is\n  up?")})
	if got.resp.Text != "You said: what is\n  up?" || got.text != got.resp.Text {
		t.Errorf("echo: %q, deltas %q", got.resp.Text, got.text)
	}
}

const ruleScript = `
rules:
  - match: "(?i)^run it$"
    steps:
      - reasoning: "I should run it."
        text: "Let me run it."
        toolCalls:
          - name: bash
            args: {command: "echo hi", env: {A: "1"}}
          - name: noargs
      - text: "Done: {{last_tool_output}}"
  - match: "run"
    steps:
      - text: "second rule"
  - match: "long"
    steps:
      - text: "a b c"
        finish: length
  - match: "fail"
    steps:
      - error: "boom"
  - match: "garbage"
    steps:
      - garbage: true
default:
  steps:
    - text: "default for {{last_user_text}}"
`

func TestScriptedRulesAndSteps(t *testing.T) {
	m := scriptedModel(t, ruleScript)
	msgs := user("Run it")
	first := stream(t.Context(), m, llm.Request{Messages: msgs})
	if first.err != nil {
		t.Fatal(first.err)
	}
	if first.resp.Text != "Let me run it." || first.resp.Reasoning != "I should run it." || first.reasoning != first.resp.Reasoning {
		t.Errorf("first step: %+v", first.resp)
	}
	if first.resp.FinishReason != llm.FinishToolCalls || len(first.resp.ToolCalls) != 2 {
		t.Fatalf("first step calls: %+v (%s)", first.resp.ToolCalls, first.resp.FinishReason)
	}
	bash, noargs := first.resp.ToolCalls[0], first.resp.ToolCalls[1]
	if bash.Name != "bash" || bash.Arguments != `{"command":"echo hi","env":{"A":"1"}}` || noargs.Arguments != "{}" {
		t.Errorf("tool calls %+v", first.resp.ToolCalls)
	}
	if bash.ID != "call_2_0" || noargs.ID != "call_2_1" {
		t.Errorf("ids %q, %q; want call_2_0, call_2_1", bash.ID, noargs.ID)
	}
	if first.resp.Usage != nil {
		t.Errorf("usage %+v reported by a script without usage: true", first.resp.Usage)
	}

	msgs = append(msgs,
		history.Message{Role: history.RoleAssistant, Content: first.resp.Text, ToolCalls: first.resp.ToolCalls},
		history.Message{Role: history.RoleTool, ToolCallID: bash.ID, Content: "hi"},
		history.Message{Role: history.RoleTool, ToolCallID: noargs.ID, Content: "nothing"},
	)
	second := stream(t.Context(), m, llm.Request{Messages: msgs})
	if second.resp.Text != "Done: nothing" || second.resp.FinishReason != llm.FinishStop {
		t.Errorf("second step: %+v", second.resp)
	}

	msgs = append(msgs, history.Message{Role: history.RoleAssistant, Content: second.resp.Text})
	third := stream(t.Context(), m, llm.Request{Messages: msgs})
	if third.err != nil || third.resp.Text != "" || third.resp.FinishReason != llm.FinishStop || len(third.deltas) != 0 {
		t.Errorf("past the last step: %+v, %d deltas, err %v; want empty text and stop", third.resp, len(third.deltas), third.err)
	}

	for prompt, want := range map[string]string{
		"please run":    "second rule",
		"make it long":  "a b c",
		"something new": "default for something new",
	} {
		got := stream(t.Context(), m, llm.Request{Messages: user(prompt)})
		if got.resp.Text != want {
			t.Errorf("%q answered %q, want %q", prompt, got.resp.Text, want)
		}
	}
	if got := stream(t.Context(), m, llm.Request{Messages: user("long")}); got.resp.FinishReason != llm.FinishLength {
		t.Errorf("finish override: %q, want length", got.resp.FinishReason)
	}
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("fail")}).err, "model server: boom")
	checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("garbage")}).err, "malformed stream")
}

// TestScriptAnswerSkipsSummaries keys the answer on what the user typed,
// not on a /compact summary that follows it in the history.
func TestScriptAnswerSkipsSummaries(t *testing.T) {
	msgs := []history.Message{
		{Role: history.RoleUser, Content: "ping"},
		{Role: history.RoleUser, Content: "Summary of the conversation so far.", Summary: true},
	}
	if st := llm.DefaultScript().Answer(msgs); st.Text != "pong" {
		t.Errorf("answer %q, want pong", st.Text)
	}
}

func TestScriptedDeltasKeepWhitespace(t *testing.T) {
	// With a token rate, one delta per word; without, the text at once.
	for rate, n := range map[string]int{"tokensPerSec: 100000\n": 5, "": 1} {
		m := scriptedModel(t, rate+"rules: [{match: x, steps: [{text: \"  two  spaces\\tand\\n\\nlines \"}]}]\n")
		got := stream(t.Context(), m, llm.Request{Messages: user("x")})
		if want := "  two  spaces\tand\n\nlines "; got.text != want || got.resp.Text != want {
			t.Errorf("deltas %q, text %q, want %q", got.text, got.resp.Text, want)
		}
		if len(got.deltas) != n {
			t.Errorf("%q: deltas %q, want %d", rate, got.deltas, n)
		}
	}
}

// TestScriptedPacing: the script's latency and rate are waited out, and a
// step that sets them to zero waits for nothing. The first is a lower
// bound on the time taken, which a loaded machine only makes easier to
// meet; the second runs under a script whose own pacing would take an
// hour, so that a step that kept it would hang rather than be slow.
func TestScriptedPacing(t *testing.T) {
	m := scriptedModel(t, `
latency: 40ms
tokensPerSec: 100
rules:
  - match: slow
    steps: [{text: "one two three four five"}]
`)
	start := time.Now()
	stream(t.Context(), m, llm.Request{Messages: user("slow")})
	if d := time.Since(start); d < 40*time.Millisecond+5*10*time.Millisecond {
		t.Errorf("40ms latency and 5 words at 100/s took only %v", d)
	}
	m = scriptedModel(t, `
latency: 1h
tokensPerSec: 0.001
rules:
  - match: fast
    steps: [{text: "one two three", latency: 0s, tokensPerSec: 0}]
`)
	start = time.Now()
	got := stream(testwait.Context(t), m, llm.Request{Messages: user("fast")})
	t.Logf("a step overriding latency and rate to zero took %v", time.Since(start))
	if got.err != nil || got.text != "one two three" {
		t.Errorf("a step overriding latency and rate to zero: %q, %v (the script's pacing takes an hour)", got.text, got.err)
	}
}

// TestScriptedCancelDuringSleep: the sleep is an hour, so the cancel is
// the only way out; a sleep that ignored it would reach the hang bound,
// whose end is a deadline, not a cancel.
func TestScriptedCancelDuringSleep(t *testing.T) {
	m := scriptedModel(t, "rules: [{match: hang, steps: [{sleep: 1h, text: late}]}]\n")
	ctx, cancel := context.WithCancel(testwait.Context(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	got := stream(ctx, m, llm.Request{Messages: user("hang")})
	t.Logf("cancelled after %v with %v", time.Since(start), got.err)
	if !errors.Is(got.err, context.Canceled) {
		t.Errorf("cancelled with %v, want context.Canceled", got.err)
	}
}

// TestScriptedStallAndTruncate: the scripted model plays a server that
// hangs mid-answer and one that dies mid-answer, as llmtest does over HTTP.
func TestScriptedStallAndTruncate(t *testing.T) {
	m := scriptedModel(t, `
rules:
  - {match: stall, steps: [{text: "Let me see.", stall: true}]}
  - {match: cut, steps: [{text: "Half an answer", truncate: true}]}
`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var text string
	_, err := m.Stream(ctx, llm.Request{Messages: user("stall")}, func(d llm.Delta) {
		text += d.Text
		cancel() // the stall lasts until the caller gives up
	})
	if text != "Let" || !errors.Is(err, context.Canceled) {
		t.Errorf("stall: streamed %q, error %v; want the first word and context.Canceled", text, err)
	}
	got := stream(t.Context(), m, llm.Request{Messages: user("cut")})
	checkOneLine(t, got.err, "model server: the model server ended the stream early")
	if got.text != "Half an answer" {
		t.Errorf("truncate: streamed %q, want the whole text before the error", got.text)
	}
}

// TestScriptedIdleTimeout: model.idleTimeout ends a scripted call that
// goes quiet, as it ends a server's, so that a stall or a long sleep in a
// script plays what a hung server does in mm, not a hang until cancel. As
// over HTTP, only silence counts: a slow but steady stream is not cut.
func TestScriptedIdleTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(`
rules:
  - {match: stall, steps: [{text: "Let me see.", stall: true}]}
  - {match: sleep, steps: [{text: "late", sleep: 30s}]}
  - {match: slow, steps: [{text: "one two", tokensPerSec: 1}]}
  - {match: steady, steps: [{text: "a b c d e f g h", tokensPerSec: 25}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := llm.New(llm.Config{Provider: llm.ProviderScripted, Script: path, IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for prompt, text := range map[string]string{"stall": "Let", "sleep": "", "slow": ""} {
		// Without the timeout the call would wait for its caller: the
		// test gives up at the hang bound. The stall's first word comes
		// at once, unless a loaded machine is slower than the timeout:
		// that try is run again.
		whileSlow(t, prompt+": the timeout came before the first word", func() bool {
			start := time.Now()
			got := stream(testwait.Context(t), m, llm.Request{Messages: user(prompt)})
			t.Logf("%s: the call ended after %v", prompt, time.Since(start))
			if got.err == nil {
				t.Errorf("%s: no error, want the idle timeout", prompt)
				return false
			}
			checkOneLine(t, got.err, "no answer for 200ms (model.idleTimeout)")
			if errors.Is(got.err, context.Canceled) {
				t.Errorf("%s: error %v matches context.Canceled: only the caller cancels", prompt, got.err)
			}
			if got.text == "" && text != "" {
				return true
			}
			if got.text != text {
				t.Errorf("%s: streamed %q before the timeout, want %q", prompt, got.text, text)
			}
			return false
		})
	}
	// Eight words 40ms apart take longer than the timeout, yet no gap is
	// as long. A gap can still reach it on a loaded machine: that try is
	// run again, while code that counts the whole call times out on every
	// one.
	whileSlow(t, "a gap reached the timeout", func() bool {
		got := stream(t.Context(), m, llm.Request{Messages: user("steady")})
		if timedOut(got.err) {
			return true
		}
		if got.err != nil || got.text != "a b c d e f g h" {
			t.Errorf("steady: %q, %v", got.text, got.err)
		}
		return false
	})
	// A caller that takes long with each word (an editor reading slowly)
	// is not the model's silence.
	whileSlow(t, "a gap reached the timeout", func() bool {
		slow := 0
		got, err := m.Stream(t.Context(), llm.Request{Messages: user("steady")}, func(d llm.Delta) {
			if slow++; slow <= 2 {
				time.Sleep(300 * time.Millisecond)
			}
		})
		if timedOut(err) {
			return true
		}
		if err != nil || got.Text != "a b c d e f g h" {
			t.Errorf("steady, read slowly: %q, %v", got.Text, err)
		}
		return false
	})
}

func TestParseScriptErrors(t *testing.T) {
	for name, yaml := range map[string]string{
		"bad regexp":      "rules: [{match: '(', steps: []}]",
		"unknown key":     "rules: [{match: x, steps: [{txt: hi}]}]",
		"bad finish":      "rules: [{match: x, steps: [{finish: done}]}]",
		"nameless call":   "rules: [{match: x, steps: [{toolCalls: [{args: {a: 1}}]}]}]",
		"negative rate":   "tokensPerSec: -1",
		"negative sleep":  "rules: [{match: x, steps: [{sleep: -1s}]}]",
		"bare duration":   "latency: 5",
		"not a script":    "- just\n- a list",
		"bad default":     "default: {steps: [{finish: nope}]}",
		"non-string keys": "rules: [{match: x, steps: [{toolCalls: [{name: t, args: {a: {1: 2}}}]}]}]",
		"stall and cut":   "rules: [{match: x, steps: [{stall: true, truncate: true}]}]",
		"default match":   "default: {match: x, steps: [{text: hi}]}",
	} {
		if _, err := llm.ParseScript([]byte(yaml)); err == nil {
			t.Errorf("%s: parsed %q without error", name, yaml)
		}
	}
	if s, err := llm.ParseScript(nil); err != nil || s.Answer(user("hi")).Text != "You said: hi" {
		t.Errorf("an empty script must echo, got err %v", err)
	}
}

func TestLoadScriptErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("rules: [{match: '('}]"), 0o644)
	if _, err := llm.LoadScript(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v does not name %s", err, path)
	}
	if _, err := llm.New(llm.Config{Provider: llm.ProviderScripted, Script: path + ".missing"}); err == nil {
		t.Error("a missing script file must fail New")
	}
}

func TestNewUnknownProvider(t *testing.T) {
	_, err := llm.New(llm.Config{Provider: "gemini"})
	if err == nil || !strings.Contains(err.Error(), `"gemini"`) {
		t.Errorf("error %v does not name the provider", err)
	}
}

func TestNextWordAndEstimate(t *testing.T) {
	var words []string
	for rest := " héllo  wörld\n"; rest != ""; {
		var w string
		w, rest = llm.NextWord(rest)
		words = append(words, w)
	}
	if strings.Join(words, "|") != " héllo|  wörld|\n" {
		t.Errorf("words %q", words)
	}
	msgs := []history.Message{{Content: "12345678"}, {ToolCalls: []history.ToolCall{{Name: "ab", Arguments: "cd"}}}}
	if n := llm.EstimateTokens(msgs); n != 3 {
		t.Errorf("EstimateTokens = %d, want 3 (12 chars)", n)
	}
}
