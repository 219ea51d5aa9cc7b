package protocol_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
)

// TestWriteFileInOneEvent has a model server that buffers (vLLM with a
// tool parser) send a write_file call of 150 KB in one stream event, longer
// than langchaingo reads in one line: the turn must go on, and the file on
// disk be the one the model wrote, byte for byte.
func TestWriteFileInOneEvent(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 150_000; i++ {
		b.WriteString("line \"" + strings.Repeat("é", i%5) + "\" \\ 世界 🙂\t<&>\n")
	}
	content := b.String()
	quoted, _ := json.Marshal(content)
	e := newEnvScript(t, `
rules:
  - match: "^big$"
    steps:
      - toolCalls: [{name: write_file, args: {path: big.txt, content: `+string(quoted)+`}}]
      - {text: "written"}
`, nil)
	e.server.SetBuffered(true)
	sid := e.newSession()
	res := e.ask(sid, "big")
	if res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("stop reason %s; log:\n%s", res.StopReason, e.conn.Stderr.String())
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); !strings.HasSuffix(text, "written") {
		t.Errorf("text %.300q, want the answer after the tool", text)
	}
	got, err := os.ReadFile(filepath.Join(e.cwd, "big.txt"))
	if err != nil || string(got) != content {
		t.Errorf("file of %d bytes (%v), want the %d bytes the model wrote", len(got), err, len(content))
	}
}
