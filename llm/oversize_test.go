package llm

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func TestCutJSONString(t *testing.T) {
	var b strings.Builder
	for b.Len() < 5000 {
		b.WriteString(`a\"b\\c\n\t\u0001<&>\u2028é世🙂\ud83d\ude42\/`)
	}
	long := `"` + b.String() + `"`
	for _, raw := range []string{long, `"` + strings.Repeat(`\ud800x`, 300) + `"`, `"short"`} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		for _, room := range []int{9, 16, 100, 4096} {
			pieces, err := cutJSONString(raw, room)
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for _, p := range pieces {
				var s string
				if len(p) > room && len(pieces) > 1 || json.Unmarshal(p, &s) != nil || !utf8.ValidString(s) || s == "" {
					t.Fatalf("room %d: piece %s of %d bytes", room, p, len(p))
				}
				got.WriteString(s)
			}
			if got.String() != want {
				t.Errorf("room %d: %d pieces join to %q, want %q", room, len(pieces), got.String(), want)
			}
		}
	}
}

// rewritten reads body through a streamBody of g, as langchaingo does:
// with a bufio.Scanner of the library's line limit.
func rewritten(t *testing.T, g *guard, body string) []string {
	t.Helper()
	g.finished = nil
	sc := bufio.NewScanner(g.watch(io.NopCloser(iotest.HalfReader(strings.NewReader(body))), &call{}))
	sc.Buffer(nil, g.lineLimit)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestLineLimit: a line the library reads passes as it is, however close
// to the limit; a line one byte longer is rewritten.
func TestLineLimit(t *testing.T) {
	g := &guard{sse: true, lineLimit: sseLineLimit, split: splitOpenAI}
	event := func(size int) string {
		head, tail := `data: {"choices":[{"index":0,"delta":{"content":"`, `"},"finish_reason":null}]}`
		return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	}
	fits, over := event(sseLineLimit-1), event(sseLineLimit)
	lines := rewritten(t, g, fits+"\n\n"+over+"\n\ndata: [DONE]\n")
	if len(lines) < 6 || lines[0] != fits || lines[1] != "" || lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("%d lines; want the first as it was, then the long one cut", len(lines))
	}
	var text string
	for _, l := range lines[2 : len(lines)-2] {
		if l == "" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string }
			}
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &c); err != nil {
			t.Fatalf("line %.100s: %v", l, err)
		}
		text += c.Choices[0].Delta.Content
	}
	if want := strings.Repeat("x", sseLineLimit-len(`data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}`)); text != want {
		t.Errorf("the cut line holds %d bytes of text, want %d", len(text), len(want))
	}
}

// TestAnthropicRewriteIsSSE: each event a long one becomes is a whole SSE
// event, with the event line of the long one.
func TestAnthropicRewriteIsSSE(t *testing.T) {
	text := strings.Repeat("y", 40_000)
	lines := rewritten(t, &guard{sse: true, lineLimit: sseLineLimit, split: splitAnthropic},
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\""+text+text+"\"}}\r\n\r\n"+
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	// The scanner drops the \r of a line. Pieces are 16 KiB of JSON:
	// 16,382 characters between the quotes.
	want := []string{"event: content_block_delta"}
	all := text + text
	for i := 0; i < len(all); i += 16382 {
		if i > 0 {
			want = append(want, "", "event: content_block_delta")
		}
		want = append(want, `data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"`+all[i:min(i+16382, len(all))]+`"}}`)
	}
	want = append(want, "", "event: content_block_stop", `data: {"type":"content_block_stop","index":1}`, "")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %.100s (%d bytes), want %.100s (%d bytes)", i, lines[i], len(lines[i]), want[i], len(want[i]))
		}
	}
}
