package protocol_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

// promptScript answers a prompt of @mentions, and ping for the second
// session that measures how the others fare.
const promptScript = `
rules:
  - match: "^ping$"
    steps: [{text: "pong"}]
  - match: "^@"
    steps: [{text: "seen"}]
usage: true
`

// hugePromptBytes is the size of the hostile prompt: 5 MiB (just over
// prompt.maxTextBytes, quick under -race), or
// MM_HUGE_PROMPT_MIB MiB (the figures are for 60).
func hugePromptBytes() int {
	if n, err := strconv.Atoi(os.Getenv("MM_HUGE_PROMPT_MIB")); err == nil && n > 0 {
		return n << 20
	}
	return 5 << 20
}

// TestHugePromptRefused: a prompt of millions of "@x " — past
// prompt.maxTextBytes — is refused with a one-line error naming the key
// before its mentions are looked up; it never reaches the model or the
// history (nor the session file), and the session goes on. The window is
// no help here: like a server whose window mm cannot learn, it is too
// large to refuse anything.
func TestHugePromptRefused(t *testing.T) {
	e := newSessEnv(t, promptScript, func(c *configs.Config) {
		c.Model.ContextWindow = 1 << 30
		c.Turns.Concurrency = 4
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := e.agent()
	sid, other := e.newSession(conn), e.newSession(conn)
	e.ask(conn, sid, "ping")

	huge := strings.Repeat("@x ", hugePromptBytes()/3)
	var err error
	f := measureAttack(t, ctx, conn, other, func() { _, err = conn.Ask(ctx, sid, huge) })
	t.Logf("a %.1f MiB prompt of @x: %v", float64(len(huge))/(1<<20), f)
	huge = ""
	file := filepath.Join(e.cwd, e.cfg.Sessions.Dir, string(sid)+".json")
	if fi, err := os.Stat(file); err == nil {
		t.Logf("session file after it: %.1f MiB", float64(fi.Size())/(1<<20))
	}

	if err == nil {
		t.Fatal("the huge prompt was taken")
	}
	if msg := internalError(t, err); !strings.Contains(msg, "prompt.maxTextBytes") || !strings.Contains(msg, "too large") {
		t.Errorf("error %q does not say the prompt is too large for prompt.maxTextBytes", msg)
	}
	if strings.Contains(acptest.Text(conn.Client.Updates(sid)), "seen") {
		t.Error("the huge prompt reached the model")
	}
	e.ask(conn, sid, "ping")
	if f := e.file(sid); len(f.History) != 5 || f.History[3].Content != "ping" {
		t.Errorf("history after the refusal: %d messages", len(f.History))
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() > 1<<20 {
		t.Errorf("session file: %v, %d bytes", err, fi.Size())
	}
}

// TestPastedFilesCountTowardTheTextCap: embedded resources are each cut at
// prompt.maxResourceBytes, but many of them still make a prompt too large:
// what they inline counts toward prompt.maxTextBytes.
func TestPastedFilesCountTowardTheTextCap(t *testing.T) {
	e := newSessEnv(t, promptScript, func(c *configs.Config) {
		c.Prompt.MaxTextBytes = 64 << 10
		c.Prompt.MaxResourceBytes = 16 << 10
	})
	conn := e.agent()
	sid := e.newSession(conn)
	page := strings.Repeat("a line of a pasted file\n", 1000) // 24 KiB, cut at 16
	var blocks []acp.ContentBlock
	blocks = append(blocks, acp.TextBlock("@ look at these"))
	for i := range 3 {
		blocks = append(blocks, acp.ResourceBlock(acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{
			Uri: fmt.Sprintf("file:///tmp/f%d.txt", i), Text: page}}))
	}
	if _, err := conn.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: blocks}); err != nil {
		t.Fatalf("three files cut to 16 KiB each (48 KiB) were refused: %v", err)
	}
	for i := 3; i < 5; i++ {
		blocks = append(blocks, acp.ResourceBlock(acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{
			Uri: fmt.Sprintf("file:///tmp/f%d.txt", i), Text: page}}))
	}
	_, err := conn.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: blocks})
	if msg := internalError(t, err); !strings.Contains(msg, "prompt.maxTextBytes") {
		t.Errorf("five files cut to 16 KiB each (80 KiB): error %q", msg)
	}
}

// TestMentionsBounded: a prompt that names more files than mm looks up
// attaches the first ones, and both the user and the model are told how
// many more were not looked up. The same @path named a million times is
// looked up once.
func TestMentionsBounded(t *testing.T) {
	e := newEnvScript(t, promptScript, nil)
	sid := e.newSession()
	const files = 300
	var b strings.Builder
	for i := range files {
		name := fmt.Sprintf("f%03d.txt", i)
		if err := writeFile(filepath.Join(e.cwd, name), "x"); err != nil {
			t.Fatal(err)
		}
		b.WriteString("@" + name + " ")
	}
	b.WriteString(strings.Repeat("@f000.txt ", 100000))
	start := time.Now()
	e.ask(sid, b.String())
	t.Logf("%d distinct @mentions and 100000 repeats (%d KiB): %v", files, b.Len()>>10, time.Since(start).Round(time.Millisecond))

	msgs := e.requestMessages()
	got := msgs[len(msgs)-1]["content"].(string)
	attached := strings.Count(got, "[attached file: ")
	if attached != 256 {
		t.Errorf("%d files attached, want the first 256", attached)
	}
	note := "[only the first 256 @mentions were looked up: 44 more were not attached]"
	if !strings.HasSuffix(got, note) {
		t.Errorf("the model was not told: %q", got[max(0, len(got)-200):])
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.Contains(text, "📎 only the first 256 @mentions were looked up: 44 more were not attached") {
		t.Errorf("the user was not told: %q", text)
	}
	if n := strings.Count(e.conn.Stderr.String(), ": attached "); n != 256 {
		t.Errorf("%d attach log lines, want 256", n)
	}
}
