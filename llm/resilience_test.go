package llm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
)

// This file tests what the HTTP providers do when the server misbehaves:
// goes quiet (idle timeout), ends a stream early, refuses a request for now
// (retries), and how they keep and warm their connections. Each test runs
// against every provider, through real HTTP on 127.0.0.1.

// wire is one HTTP provider's side of the fake servers: where it asks and
// what a stream of the answer "Hi there." looks like.
type wire struct {
	name        string
	provider    string
	path        string // the chat endpoint
	warmPath    string // what Warm asks for
	contentType string
	apiRoot     string   // appended to the server URL to make BaseURL
	first       []string // lines that stream "Hi"
	unfinished  []string // then the lines that stream " there."
	finish      []string // then the lines that end the answer
	more        []string // lines that stream " more", which may come between first and unfinished
}

var wires = []wire{
	{
		name: "openai", provider: llm.ProviderOpenAI, apiRoot: "/v1",
		path: "/v1/chat/completions", warmPath: "/v1/models", contentType: "text/event-stream",
		first:      []string{`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`, ``},
		unfinished: []string{`data: {"choices":[{"index":0,"delta":{"content":" there."},"finish_reason":null}]}`, ``},
		finish: []string{
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, ``,
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, ``,
			`data: [DONE]`, ``,
		},
		more: []string{`data: {"choices":[{"index":0,"delta":{"content":" more"},"finish_reason":null}]}`, ``},
	},
	{
		name: "anthropic", provider: llm.ProviderAnthropic, apiRoot: "/v1",
		path: "/v1/messages", warmPath: "/v1/models", contentType: "text/event-stream",
		first: []string{
			`event: message_start`,
			`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}`, ``,
			`event: content_block_start`,
			`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, ``,
			`event: content_block_delta`,
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, ``,
		},
		unfinished: []string{
			`event: content_block_delta`,
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there."}}`, ``,
			`event: content_block_stop`,
			`data: {"type":"content_block_stop","index":0}`, ``,
		},
		finish: []string{
			`event: message_delta`,
			`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`, ``,
			`event: message_stop`,
			`data: {"type":"message_stop"}`, ``,
		},
		more: []string{
			`event: content_block_delta`,
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" more"}}`, ``,
		},
	},
	{
		name: "ollama", provider: llm.ProviderOllama,
		path: "/api/chat", warmPath: "/api/version", contentType: "application/x-ndjson",
		first:      []string{`{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}`},
		unfinished: []string{`{"model":"m","message":{"role":"assistant","content":" there."},"done":false}`},
		finish:     []string{`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":2}`},
		more:       []string{`{"model":"m","message":{"role":"assistant","content":" more"},"done":false}`},
	},
}

// complete is the whole answer.
func (w wire) complete() []string {
	return append(append(append([]string{}, w.first...), w.unfinished...), w.finish...)
}

// long is a complete answer with n chunks " more" in its middle: it
// streams "Hi", n times " more", then " there.".
func (w wire) long(n int) []string {
	lines := append([]string{}, w.first...)
	for range n {
		lines = append(lines, w.more...)
	}
	return append(append(lines, w.unfinished...), w.finish...)
}

// fakeServer answers the chat endpoint with answer, given the request's
// number (from 1), and anything else (a warm-up) with an empty JSON object.
type fakeServer struct {
	*httptest.Server
	chats     atomic.Int32
	others    atomic.Int32
	otherPath atomic.Value // the path of the last other request
	conns     atomic.Int32
}

func newFake(t *testing.T, wr wire, answer func(n int, w http.ResponseWriter, r *http.Request)) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path != wr.path {
			f.otherPath.Store(r.URL.Path)
			f.others.Add(1)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "{}")
			return
		}
		answer(int(f.chats.Add(1)), w, r)
	}))
	f.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

// model builds wr's provider against f with the resilience settings of cfg.
func (wr wire) model(t *testing.T, f *fakeServer, cfg llm.Config) llm.Model {
	t.Helper()
	return wr.modelAt(t, f.URL+wr.apiRoot, cfg)
}

func (wr wire) modelAt(t *testing.T, baseURL string, cfg llm.Config) llm.Model {
	t.Helper()
	cfg.Provider, cfg.BaseURL, cfg.Name, cfg.Temperature = wr.provider, baseURL, "test-model", -1
	m, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// answers streams lines, flushed one by one.
func answers(wr wire, lines []string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { flushLines(w, wr.contentType, lines...) }
}

// stalls streams the first lines, then sends nothing until the client goes.
func stalls(wr wire) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, r *http.Request) {
		flushLines(w, wr.contentType, wr.first...)
		<-r.Context().Done()
	}
}

// refuses answers the first n requests with status (and retryAfter, when
// set), the others with the complete stream; n < 0 refuses them all.
func refuses(wr wire, n, status int, retryAfter string) func(int, http.ResponseWriter, *http.Request) {
	return func(i int, w http.ResponseWriter, _ *http.Request) {
		if n >= 0 && i > n {
			flushLines(w, wr.contentType, wr.complete()...)
			return
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":{"message":"busy","type":"server_error"}}`)
	}
}

func notices(deltas []llm.Delta) []string {
	var out []string
	for _, d := range deltas {
		if d.Kind == llm.DeltaNotice {
			out = append(out, d.Text)
		}
	}
	return out
}

// forEachWire runs test for every provider, in parallel: most of these
// tests wait on a timer, not on the CPU.
func forEachWire(t *testing.T, test func(t *testing.T, wr wire)) {
	for _, wr := range wires {
		t.Run(wr.name, func(t *testing.T) {
			t.Parallel()
			test(t, wr)
		})
	}
}

// idleError is what a call that model.idleTimeout ended says.
const idleError = "(model.idleTimeout)"

// timedOut says whether err is the idle timeout's.
func timedOut(err error) bool { return err != nil && strings.Contains(err.Error(), idleError) }

// whileSlow runs try again for as long as it reports that the machine was
// too slow for it, within the hang bound. A test that means a short limit
// (model.idleTimeout, the drain's) not to fire cannot keep a loaded machine
// from reaching it once, before a chunk arrives; try then reports slow and
// checks nothing. Code that reaches the limit for the wrong reason does so
// on every try, and the test fails at the bound.
func whileSlow(t *testing.T, what string, try func() (slow bool)) {
	t.Helper()
	deadline := time.Now().Add(testwait.Hang)
	for n := 1; try(); n++ {
		t.Logf("try %d: %s", n, what)
		if time.Now().After(deadline) {
			t.Fatalf("%s on every one of %d tries over %v", what, n, testwait.Hang)
		}
	}
}

// prompt is the request of these tests.
var prompt = llm.Request{Messages: []history.Message{{Role: history.RoleUser, Content: "hi"}}, Temperature: -1}

func TestCompleteStreamSucceeds(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, answers(wr, wr.complete()))
		got := stream(t.Context(), wr.model(t, f, llm.Config{IdleTimeout: time.Minute, Retries: 3}), prompt)
		if got.err != nil || got.text != "Hi there." || got.resp.Text != got.text || len(notices(got.deltas)) != 0 {
			t.Errorf("text %q (response %q), notices %q, err %v", got.text, got.resp.Text, notices(got.deltas), got.err)
		}
	})
}

// TestIdleTimeout: a server that stalls after its first chunk, for good,
// so that the timeout is the only way out. The first chunk has to arrive
// within the timeout too, which a loaded machine may miss: that try is run
// again.
func TestIdleTimeout(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		whileSlow(t, "the timeout came before the first chunk", func() bool {
			f := newFake(t, wr, stalls(wr))
			m := wr.model(t, f, llm.Config{IdleTimeout: 200 * time.Millisecond})
			start := time.Now()
			got := stream(testwait.Context(t), m, prompt)
			t.Logf("the idle timeout ended the call after %v", time.Since(start))
			checkOneLine(t, got.err, "model server: no answer for 200ms (model.idleTimeout)")
			if errors.Is(got.err, context.Canceled) {
				t.Errorf("error %v matches context.Canceled: only the caller cancels", got.err)
			}
			if got.text == "" {
				return true
			}
			if got.text != "Hi" {
				t.Errorf("text before the stall %q, want the first chunk, Hi", got.text)
			}
			return false
		})
	})
}

// TestIdleTimeoutBeforeHeaders: the timeout counts from the request, so a
// server that never answers at all is caught too.
func TestIdleTimeoutBeforeHeaders(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		got := stream(t.Context(), wr.model(t, f, llm.Config{IdleTimeout: 200 * time.Millisecond, Retries: 2}), prompt)
		checkOneLine(t, got.err, "model server: no answer for 200ms (model.idleTimeout)")
		if n := f.chats.Load(); n != 1 {
			t.Errorf("%d requests: a timeout is not retried", n)
		}
	})
}

// TestIdleTimeoutCountsSilenceOnly streams slower than nothing at all but
// never pauses as long as the timeout: every chunk restarts it.
// A pause of 50 ms can take longer than the 400 ms timeout on a loaded
// machine; such a try is run again, while code that counts the whole call
// times out on every one.
func TestIdleTimeoutCountsSilenceOnly(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		whileSlow(t, "a pause reached the timeout", func() bool {
			f := newFake(t, wr, func(_ int, w http.ResponseWriter, _ *http.Request) {
				for _, line := range wr.complete() {
					time.Sleep(50 * time.Millisecond)
					flushLines(w, wr.contentType, line)
				}
			})
			got := stream(t.Context(), wr.model(t, f, llm.Config{IdleTimeout: 400 * time.Millisecond}), prompt)
			if timedOut(got.err) {
				return true
			}
			if got.err != nil || got.text != "Hi there." {
				t.Errorf("text %q, err %v", got.text, got.err)
			}
			return false
		})
	})
}

// TestSlowConsumerIsNotSilence: the server sends its whole answer at once
// to a consumer that takes longer than the idle timeout to take it (an
// editor that reads slowly, behind the session's stream budget). The time
// emit runs is the consumer's, not the server's silence: the call ends
// normally with the whole text, whether the consumer holds one delta for
// long or many for a little each. The holds add up to twice the timeout (a
// loaded machine only makes them longer); a try in which the machine was
// slower than the timeout to deliver a chunk is run again.
func TestSlowConsumerIsNotSilence(t *testing.T) {
	const chunks = 20
	const timeout = 300 * time.Millisecond
	consumers := []struct {
		name string
		hold func(i int) // what the consumer does with text delta i
	}{
		{"one long hold", func(i int) {
			if i == 0 {
				time.Sleep(2 * timeout)
			}
		}},
		{"many short holds", func(int) { time.Sleep(2 * timeout / chunks) }},
	}
	want := "Hi" + strings.Repeat(" more", chunks) + " there."
	forEachWire(t, func(t *testing.T, wr wire) {
		for _, c := range consumers {
			t.Run(c.name, func(t *testing.T) {
				whileSlow(t, "the timeout came between two chunks", func() bool {
					f := newFake(t, wr, answers(wr, wr.long(chunks)))
					m := wr.model(t, f, llm.Config{IdleTimeout: timeout})
					var text strings.Builder
					i := 0
					resp, err := m.Stream(t.Context(), prompt, func(d llm.Delta) {
						if d.Kind == llm.DeltaText {
							c.hold(i)
							i++
							text.WriteString(d.Text)
						}
					})
					if timedOut(err) {
						return true
					}
					if err != nil || text.String() != want || resp.Text != want {
						t.Errorf("streamed %q (response %q), err %v; want %q", text.String(), resp.Text, err, want)
					}
					return false
				})
			})
		}
	})
}

// TestIdleTimeoutAfterSlowConsumer: the idle timer is suspended while the
// consumer holds the stream, not stopped: once emit returns, the timer runs
// again, and a server that has gone quiet is caught a whole timeout later.
//
// The server stalls for good, so the timeout is the only way out. The
// check that it came a whole timeout after the hold ended is a lower
// bound, which a loaded machine only makes easier to meet. A try in which
// the timeout came before the first chunk is run again.
func TestIdleTimeoutAfterSlowConsumer(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		whileSlow(t, "the timeout came before the first chunk", func() bool {
			f := newFake(t, wr, stalls(wr))
			m := wr.model(t, f, llm.Config{IdleTimeout: 200 * time.Millisecond})
			var released time.Time
			_, err := m.Stream(testwait.Context(t), prompt, func(d llm.Delta) {
				if d.Kind == llm.DeltaText {
					time.Sleep(500 * time.Millisecond)
					released = time.Now()
				}
			})
			checkOneLine(t, err, "model server: no answer for 200ms (model.idleTimeout)")
			if released.IsZero() {
				return true
			}
			if d := time.Since(released); d < 200*time.Millisecond {
				t.Errorf("the call timed out %v after the consumer let go, want a whole timeout: its hold was counted as silence", d)
			}
			return false
		})
	})
}

// TestSlowConsumerOfARetryNotice: the consumer takes its time with a
// retry notice while the retry wait, longer than the idle timeout, runs:
// the end of the one must not restart the timer during the other (with
// Anthropic, the wait runs on another goroutine than emit).
func TestSlowConsumerOfARetryNotice(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		whileSlow(t, "the timeout came before a chunk", func() bool {
			f := newFake(t, wr, refuses(wr, 1, http.StatusTooManyRequests, "1"))
			m := wr.model(t, f, llm.Config{Retries: 1, IdleTimeout: 300 * time.Millisecond})
			var text strings.Builder
			_, err := m.Stream(t.Context(), prompt, func(d llm.Delta) {
				switch d.Kind {
				case llm.DeltaNotice:
					time.Sleep(100 * time.Millisecond)
				case llm.DeltaText:
					text.WriteString(d.Text)
				}
			})
			if timedOut(err) {
				return true
			}
			if err != nil || text.String() != "Hi there." {
				t.Errorf("streamed %q, err %v", text.String(), err)
			}
			return false
		})
	})
}

// TestEarlyEnd: a stream that ends without its finish is a failure, and
// nothing is retried once the server has answered 200.
func TestEarlyEnd(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		lines := append(append([]string{}, wr.first...), wr.unfinished...)
		f := newFake(t, wr, answers(wr, lines))
		got := stream(t.Context(), wr.model(t, f, llm.Config{Retries: 3, RetryBackoff: time.Millisecond}), prompt)
		checkOneLine(t, got.err, "model server: the model server ended the stream early")
		if got.text != "Hi there." {
			t.Errorf("streamed %q before the end, want Hi there.", got.text)
		}
		if n := f.chats.Load(); n != 1 || len(notices(got.deltas)) != 0 {
			t.Errorf("%d requests, notices %q: a stream that began must not be retried", n, notices(got.deltas))
		}
	})
}

// goid is the current goroutine's id, to check where emit runs.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

func TestRetryAfterHeader(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		var f *fakeServer
		var resp llm.Response
		var err error
		caller, elsewhere := goid(), ""
		var deltas []llm.Delta
		// The idle timeout is shorter than the wait: it must be paused. It
		// can still fire before a chunk on a loaded machine; that try is
		// run again.
		whileSlow(t, "the timeout came before a chunk", func() bool {
			f = newFake(t, wr, refuses(wr, 1, http.StatusTooManyRequests, "1"))
			m := wr.model(t, f, llm.Config{Retries: 3, IdleTimeout: 300 * time.Millisecond})
			elsewhere, deltas = "", nil
			resp, err = m.Stream(t.Context(), prompt, func(d llm.Delta) {
				if id := goid(); id != caller {
					elsewhere = id
				}
				deltas = append(deltas, d)
			})
			return timedOut(err)
		})
		if err != nil || resp.Text != "Hi there." {
			t.Fatalf("text %q, err %v", resp.Text, err)
		}
		got := notices(deltas)
		if want := "model server busy (HTTP 429), retrying in 1 s (retry 1 of 3)\n"; len(got) != 1 || got[0] != want {
			t.Errorf("notices %q, want [%q]", got, want)
		}
		if n := f.chats.Load(); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
		if elsewhere != "" {
			t.Errorf("emit called on goroutine %s, not the caller's %s", elsewhere, caller)
		}
		if strings.Contains(resp.Text, "retrying") || strings.Contains(resp.Reasoning, "retrying") {
			t.Errorf("a notice leaked into the response %+v", resp)
		}
	})
}

func TestRetryBackoff(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, refuses(wr, 2, http.StatusServiceUnavailable, ""))
		got := stream(t.Context(), wr.model(t, f, llm.Config{Retries: 3, RetryBackoff: 10 * time.Millisecond}), prompt)
		if got.err != nil || got.text != "Hi there." {
			t.Fatalf("text %q, err %v", got.text, got.err)
		}
		ns := notices(got.deltas)
		if len(ns) != 2 || f.chats.Load() != 3 {
			t.Fatalf("notices %q after %d requests, want 2 after 3", ns, f.chats.Load())
		}
		if n := f.conns.Load(); n != 1 {
			t.Errorf("%d connections: a refused answer must leave its connection to the retry", n)
		}
		for i, n := range ns {
			// 10 ms doubled per retry, plus up to half again of jitter.
			prefix := "model server busy (HTTP 503), retrying in "
			suffix := fmt.Sprintf(" ms (retry %d of 3)\n", i+1)
			if !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, suffix) {
				t.Errorf("notice %q, want %q<n>%q", n, prefix, suffix)
			}
		}
	})
}

func TestRetriesExhausted(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, refuses(wr, -1, 529, ""))
		got := stream(t.Context(), wr.model(t, f, llm.Config{Retries: 2, RetryBackoff: time.Millisecond}), prompt)
		checkOneLine(t, got.err, "model server: HTTP 529: busy (after 2 retries)")
		if n := f.chats.Load(); n != 3 || len(notices(got.deltas)) != 2 {
			t.Errorf("%d requests, notices %q; want 3 and 2", n, notices(got.deltas))
		}
	})
}

func TestRetryAfterTooLong(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, refuses(wr, -1, http.StatusServiceUnavailable, "120"))
		start := time.Now()
		got := stream(t.Context(), wr.model(t, f, llm.Config{Retries: 3}), prompt)
		t.Logf("a wait over 30 s failed after %v", time.Since(start))
		checkOneLine(t, got.err, "model server: HTTP 503: busy (the server asks to retry in 120 s)")
		if n := f.chats.Load(); n != 1 || len(notices(got.deltas)) != 0 {
			t.Errorf("%d requests, notices %q; want 1 and none", n, notices(got.deltas))
		}
	})
}

func TestNoRetriesByDefault(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, refuses(wr, -1, http.StatusServiceUnavailable, "1"))
		got := stream(t.Context(), wr.model(t, f, llm.Config{}), prompt)
		checkOneLine(t, got.err, "model server: HTTP 503: busy")
		if strings.Contains(got.err.Error(), "after") || f.chats.Load() != 1 {
			t.Errorf("error %v after %d requests, want one request", got.err, f.chats.Load())
		}
	})
}

// TestRetryConnectionRefused: a remote server that refuses the connection
// (restarting, say) is tried again, each wait told.
func TestRetryConnectionRefused(t *testing.T) {
	t.Cleanup(llm.TakeLoopbackForRemote())
	forEachWire(t, func(t *testing.T, wr wire) {
		url := strings.TrimSuffix(closedPortURL(t), "/v1") + wr.apiRoot
		got := stream(t.Context(), wr.modelAt(t, url, llm.Config{Retries: 2, RetryBackoff: time.Millisecond}), prompt)
		checkOneLine(t, got.err, "model server: connection refused ("+url+", after 2 retries)")
		ns := notices(got.deltas)
		if len(ns) != 2 {
			t.Fatalf("notices %q, want 2", ns)
		}
		for i, n := range ns {
			want := fmt.Sprintf(" ms (retry %d of 2)\n", i+1)
			if !strings.HasPrefix(n, "model server unreachable (connection refused), retrying in ") || !strings.HasSuffix(n, want) {
				t.Errorf("notice %q", n)
			}
		}
	})
}

// TestRefusedLoopbackFailsAtOnce: a server on this machine that refuses
// the connection is not running, and waiting will not start it: the call
// fails at once, whatever model.retries says, with the URL and how to
// start a server or point mm at one.
func TestRefusedLoopbackFailsAtOnce(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		url := strings.TrimSuffix(closedPortURL(t), "/v1") + wr.apiRoot
		start := time.Now()
		got := stream(t.Context(), wr.modelAt(t, url, llm.Config{Retries: 3, RetryBackoff: time.Minute}), prompt)
		t.Logf("failed after %v", time.Since(start))
		checkOneLine(t, got.err, "model server: connection refused ("+url+"): no model server is running there. Start one (", "set model.baseURL")
		if ns := notices(got.deltas); len(ns) != 0 {
			t.Errorf("notices %q: a refused loopback server is not retried", ns)
		}
	})
	for _, tc := range []struct{ provider, url, want string }{
		{llm.ProviderOpenAI, "http://127.0.0.1:%s/v1", "llama-server -m MODEL.gguf --port "},
		{llm.ProviderOllama, "http://localhost:%s", "`ollama serve`"},
	} {
		port := strings.TrimSuffix(strings.TrimPrefix(closedPortURL(t), "http://127.0.0.1:"), "/v1")
		m, err := llm.New(llm.Config{Provider: tc.provider, BaseURL: fmt.Sprintf(tc.url, port), Name: "x", Retries: 3})
		if err != nil {
			t.Fatal(err)
		}
		checkOneLine(t, stream(t.Context(), m, llm.Request{Messages: user("hi"), Temperature: -1}).err, tc.want)
	}
}

func TestCancelDuringRetryWait(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, refuses(wr, -1, http.StatusServiceUnavailable, "30"))
		m := wr.model(t, f, llm.Config{Retries: 1})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		_, err := m.Stream(ctx, prompt, func(d llm.Delta) {
			if d.Kind == llm.DeltaNotice {
				cancel()
			}
		})
		t.Logf("a cancel during a 30 s wait returned after %v", time.Since(start))
		if !errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrServer) {
			t.Errorf("error %v, want context.Canceled and no ErrServer", err)
		}
		if n := f.chats.Load(); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
}

func TestCancelDuringStall(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, stalls(wr))
		m := wr.model(t, f, llm.Config{IdleTimeout: time.Minute})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		_, err := m.Stream(ctx, prompt, func(d llm.Delta) {
			if d.Kind == llm.DeltaText {
				cancel()
			}
		})
		t.Logf("a cancel during a stall returned after %v", time.Since(start))
		if !errors.Is(err, context.Canceled) || errors.Is(err, llm.ErrServer) {
			t.Errorf("error %v, want context.Canceled and no ErrServer", err)
		}
	})
}

// TestKeepAlive: sequential calls, through one Model or two built for the
// same server, share one connection. A stream's rest is drained within
// drainTimeout (500 ms), which a loaded server can miss, costing the
// connection: that try is run again, while code that does not keep the
// connection opens more on every one.
func TestKeepAlive(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		whileSlow(t, "a drain ran out", func() bool {
			f := newFake(t, wr, answers(wr, wr.complete()))
			m := wr.model(t, f, llm.Config{})
			for range 10 {
				if got := stream(t.Context(), m, prompt); got.err != nil {
					t.Fatal(got.err)
				}
			}
			if got := stream(t.Context(), wr.model(t, f, llm.Config{}), prompt); got.err != nil {
				t.Fatal(got.err)
			}
			if n := f.conns.Load(); n != 1 {
				t.Logf("11 calls opened %d connections", n)
				return true
			}
			return false
		})
	})
}

func TestWarm(t *testing.T) {
	forEachWire(t, func(t *testing.T, wr wire) {
		f := newFake(t, wr, answers(wr, wr.complete()))
		m := wr.model(t, f, llm.Config{})
		w, ok := m.(llm.Warmer)
		if !ok {
			t.Fatalf("%T is no Warmer", m)
		}
		w.Warm(t.Context())
		if f.others.Load() != 1 || f.conns.Load() != 1 || f.otherPath.Load() != wr.warmPath {
			t.Fatalf("Warm made %d requests (%v) on %d connections, want 1 (%s) on 1", f.others.Load(), f.otherPath.Load(), f.conns.Load(), wr.warmPath)
		}
		w.Warm(t.Context())
		wr.model(t, f, llm.Config{}).(llm.Warmer).Warm(t.Context())
		if n := f.others.Load(); n != 1 {
			t.Errorf("warm-ups within 30 s made %d requests, want 1", n)
		}
		if got := stream(t.Context(), m, prompt); got.err != nil {
			t.Fatal(got.err)
		}
		if n := f.conns.Load(); n != 1 {
			t.Errorf("the call after Warm opened a connection of its own (%d in all)", n)
		}
	})
}

func TestWarmIgnoresAServerThatIsDown(t *testing.T) {
	m := openAIModel(t, closedPortURL(t))
	start := time.Now()
	m.(llm.Warmer).Warm(t.Context())
	t.Logf("Warm returned after %v", time.Since(start))
}

// TestOpenAIThroughLLMTest drives the same behaviours through llmtest, the
// fixture end-to-end tests of mm use.
func TestOpenAIThroughLLMTest(t *testing.T) {
	t.Run("retries", func(t *testing.T) {
		srv := fixture(t)
		srv.FailNext(2, http.StatusServiceUnavailable, "")
		m, _ := llm.New(llm.Config{Provider: llm.ProviderOpenAI, BaseURL: srv.URL(), Temperature: -1, Retries: 3, RetryBackoff: 10 * time.Millisecond})
		got := stream(t.Context(), m, llm.Request{Messages: user("hello"), Temperature: -1})
		if got.err != nil || len(notices(got.deltas)) != 2 || srv.Requests() != 3 {
			t.Errorf("err %v, notices %q, %d requests", got.err, notices(got.deltas), srv.Requests())
		}
	})
	t.Run("stall", func(t *testing.T) {
		srv := fixture(t)
		m, _ := llm.New(llm.Config{Provider: llm.ProviderOpenAI, BaseURL: srv.URL(), Temperature: -1, IdleTimeout: 200 * time.Millisecond})
		whileSlow(t, "the timeout came before the first word", func() bool {
			got := stream(testwait.Context(t), m, llm.Request{Messages: user("stall"), Temperature: -1})
			checkOneLine(t, got.err, "no answer for 200ms")
			if got.text == "" {
				return true
			}
			if got.text != "Let" {
				t.Errorf("streamed %q, want the first word", got.text)
			}
			return false
		})
	})
	t.Run("truncate", func(t *testing.T) {
		srv := fixture(t)
		got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("truncate"), Temperature: -1})
		checkOneLine(t, got.err, "the model server ended the stream early")
		if got.text != "Half an answer" {
			t.Errorf("streamed %q", got.text)
		}
	})
	t.Run("oversized", func(t *testing.T) {
		srv := fixture(t)
		srv.SetContextWindow(10)
		got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user(strings.Repeat("word ", 100)), Temperature: -1})
		checkOneLine(t, got.err, "HTTP 400: the request exceeds the available context size", "n_ctx 10")
		if srv.Oversized() != 1 || srv.MaxPromptTokens() <= 10 {
			t.Errorf("oversized %d, max prompt %d", srv.Oversized(), srv.MaxPromptTokens())
		}
	})
	t.Run("keep-alive and warm", func(t *testing.T) {
		// As in TestKeepAlive, a drain that ran out on a loaded machine
		// costs a connection: that try is run again.
		whileSlow(t, "a drain ran out", func() bool {
			srv := fixture(t)
			m := openAIModel(t, srv.URL())
			m.(llm.Warmer).Warm(t.Context())
			if srv.Connections() != 1 || srv.Requests() != 0 {
				t.Fatalf("Warm: %d connections, %d chat requests; want 1 and 0", srv.Connections(), srv.Requests())
			}
			for range 10 {
				if got := stream(t.Context(), m, llm.Request{Messages: user("hello"), Temperature: -1}); got.err != nil {
					t.Fatal(got.err)
				}
			}
			if got := stream(t.Context(), openAIModel(t, srv.URL()), llm.Request{Messages: user("tools"), Temperature: -1}); got.err != nil {
				t.Fatal(got.err)
			}
			if n := srv.Connections(); n != 1 {
				t.Logf("a warm-up and 11 calls opened %d connections", n)
				return true
			}
			return false
		})
	})
}

// TestDrainAfterDone: langchaingo's OpenAI client stops reading at
// [DONE]. When the end of the response comes a moment later (a server
// that flushes [DONE] and then finishes its handler), the body is drained
// on close, so the connection goes back to the pool instead of being shut.
func TestDrainAfterDone(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	m := openAIModel(t, srv.URL)
	// The rest comes 20 ms later, within drainTimeout (500 ms) unless the
	// machine is loaded: a try whose drain ran out, costing a connection,
	// is run again; code that does not drain opens one on every call.
	whileSlow(t, "a drain ran out", func() bool {
		before := conns.Load()
		for range 5 {
			if got := stream(t.Context(), m, prompt); got.err != nil || got.text != "ok" {
				t.Fatalf("%q, %v", got.text, got.err)
			}
		}
		if n := conns.Load() - before; n > 1 {
			t.Logf("5 calls opened %d connections", n)
			return true
		}
		return false
	})
}
