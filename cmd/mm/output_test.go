package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
)

const outputScript = `
rules:
  - match: "^count$"
    steps:
      - toolCalls: [{name: bash, args: {command: "seq 1 300000"}}]
      - {text: "counted"}
usage: true
`

// TestOutputSizedToTheWindow: with an 8k window, `seq 1 300000` (1.9 MB)
// leaves the model a result within its budget (a tenth of the window, 4
// KiB at the least) that names the file holding the whole output; the
// file holds all of it, the turn goes on to its end, and the file goes
// with the session. A real mm over its pipes, the recording test server.
func TestOutputSizedToTheWindow(t *testing.T) {
	const window = 8192
	conn, _, srv := startMMScript(t, outputScript, "  contextWindow: 8192\n")
	srv.SetContextWindow(window)
	ctx, _, sess := openSession(t, conn)
	res, err := conn.Ask(ctx, sess.SessionId, "count")
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != acp.StopReasonEndTurn || !strings.Contains(acptest.Text(conn.Client.Updates(sess.SessionId)), "counted") {
		t.Fatalf("the turn did not go on: %s\n%s", res.StopReason, conn.Stderr.String())
	}
	if srv.Oversized() != 0 {
		t.Errorf("%d request(s) over the window", srv.Oversized())
	}
	msgs := srv.LastRequest()["messages"].([]any)
	result, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	if i := strings.Index(result, "[…"); i >= 0 {
		t.Logf("the model read %d bytes; its marker: %s", len(result), result[i:i+strings.IndexByte(result[i:], '\n')])
	}
	if len(result) > 4096+len("\n[exit code: 0]") {
		t.Errorf("the result is %d bytes, over the budget of 4096", len(result))
	}
	m := regexp.MustCompile(`the whole output is in (\S+\.out):`).FindStringSubmatch(result)
	if m == nil || !strings.HasPrefix(result, "1\n2\n") || !strings.HasSuffix(result, "300000\n[exit code: 0]") {
		t.Fatalf("the result does not keep head and tail and name its file: %q", result)
	}
	want, _ := exec.Command("seq", "1", "300000").Output()
	if got, err := os.ReadFile(m[1]); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the file holds %d bytes (%v), want %d", len(got), err, len(want))
	}
	if _, err := conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: sess.SessionId}); err != nil {
		t.Fatal(err)
	}
	// The folder goes with the session, off its actor.
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Dir(m[1])); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s outlived its session", filepath.Dir(m[1]))
		}
	}
}
