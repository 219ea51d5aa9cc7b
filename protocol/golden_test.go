package protocol_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGoldenWire records every line mm writes on stdout through a session
// that uses each kind of payload — initialize, session/new with its modes
// and model selector, available_commands_update, streamed chunks, a tool
// call asking permission with its diff, its updates, usage, the prompt
// response, /new, a replay by session/load — and compares them with
// testdata/golden/session.jsonl. Ids, paths and token counts are
// normalised. After an intended change of the wire format, run
// go test ./protocol -run TestGoldenWire -update and review the diff.
func TestGoldenWire(t *testing.T) {
	e := newToolEnv(t, func(c *configs.Config) { c.Yolo = false; c.Sessions.Enabled = true })
	sid := e.newSession()
	e.ask(sid, "echo")
	e.ask(sid, "write")
	if _, err := e.conn.CloseSession(e.ctx, acp.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.conn.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	e.ask(sid, "/new")
	got := normalise(e.conn.Stdout.String(), e.cwd)
	path := filepath.Join("testdata", "golden", "session.jsonl")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("line %d differs:\n got  %s\n want %s", i+1, g, w)
			}
		}
	}
}

var (
	reSession  = regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{8}`)
	reCount    = regexp.MustCompile(`"(inputTokens|outputTokens|totalTokens|used|size)":\d+`)
	reModel    = regexp.MustCompile(`call_\d+_\d+`)
	reVersion  = regexp.MustCompile(`"version":"[^"]*"`)
	reTokens   = regexp.MustCompile(`\(\d+ tokens, [0-9.]+s\)`)
	reTime     = regexp.MustCompile(`"updatedAt":"[^"]*"`)
	reMessage  = regexp.MustCompile(`"messageId":"([0-9a-f-]{36})"`)
	reTimeOnly = regexp.MustCompile(`(?m)^.*"update":\{"sessionUpdate":"session_info_update","updatedAt":"[^"]*"\}\}\}\n`)
)

func normalise(out, cwd string) string {
	// A session_info_update that only moves updatedAt is sent when a turn
	// ends in a new second: whether it comes is the clock's business.
	out = reTimeOnly.ReplaceAllString(out, "")
	out = foldChunks(out)
	out = strings.ReplaceAll(out, cwd, "<cwd>")
	out = reSession.ReplaceAllString(out, "<session>")
	out = reCount.ReplaceAllString(out, `"$1":<n>`)
	out = reModel.ReplaceAllString(out, "<model-call>")
	out = reVersion.ReplaceAllString(out, `"version":"<version>"`)
	out = reTime.ReplaceAllString(out, `"updatedAt":"<time>"`)
	// A message id is random: each becomes <message-N>, N in the order
	// they first appear, so that which chunks share one still shows.
	seen := map[string]int{}
	out = reMessage.ReplaceAllStringFunc(out, func(m string) string {
		id := reMessage.FindStringSubmatch(m)[1]
		if seen[id] == 0 {
			seen[id] = len(seen) + 1
		}
		return fmt.Sprintf(`"messageId":"<message-%d>"`, seen[id])
	})
	return reTokens.ReplaceAllString(out, "(<n> tokens, <t>s)")
}

// foldChunks joins adjacent agent_message_chunk lines of one session, and
// keeps the last of adjacent usage_update lines: how a streamed answer is
// cut into chunks, and how many usage updates are superseded before they
// are written, depend on timing (mm folds what queues up); what they say
// does not.
func foldChunks(out string) string {
	type chunk struct {
		Params struct {
			SessionID string `json:"sessionId"`
			Update    struct {
				Kind      string          `json:"sessionUpdate"`
				Content   json.RawMessage `json:"content"`
				Meta      json.RawMessage `json:"_meta"`
				MessageID string          `json:"messageId"`
			} `json:"update"`
		} `json:"params"`
	}
	var lines []string
	var prevSession, prevText, prevID string
	prev := -1
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var c chunk
		var text struct {
			Text string `json:"text"`
		}
		if json.Unmarshal([]byte(l), &c) == nil && c.Params.Update.Kind == "usage_update" && len(lines) > 0 && prev != len(lines)-1 &&
			strings.Contains(lines[len(lines)-1], `"sessionUpdate":"usage_update"`) && strings.Contains(lines[len(lines)-1], `"sessionId":"`+c.Params.SessionID+`"`) {
			lines[len(lines)-1] = l
			continue
		}
		if c.Params.Update.Kind == "agent_message_chunk" && c.Params.Update.Meta == nil &&
			json.Unmarshal(c.Params.Update.Content, &text) == nil {
			if prev == len(lines)-1 && prev >= 0 && prevSession == c.Params.SessionID && prevID == c.Params.Update.MessageID {
				prevText += text.Text
				b, _ := json.Marshal(prevText)
				id := ""
				if prevID != "" {
					id = `"messageId":"` + prevID + `",`
				}
				lines[prev] = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + prevSession + `","update":{"content":{"text":` + string(b) + `,"type":"text"},` + id + `"sessionUpdate":"agent_message_chunk"}}}`
				continue
			}
			prev, prevSession, prevText, prevID = len(lines), c.Params.SessionID, text.Text, c.Params.Update.MessageID
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n") + "\n"
}
