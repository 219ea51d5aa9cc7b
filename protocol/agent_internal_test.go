package protocol

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
)

// TestAgentMethodsWithoutTheIngress: acp.Agent's Prompt and Cancel do what
// their names say when called directly, as the SDK would call them for an
// embedder that serves the Agent on a connection of its own: through the
// same Session.Start and Cancel as the prompts read from stdin.
func TestAgentMethodsWithoutTheIngress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - match: \"^ping$\"\n    steps: [{text: pong}]\n  - match: \"^slow$\"\n    steps: [{sleep: 1h}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := llm.New(llm.Config{Provider: "scripted", Script: path})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	c, err := Start(Options{Config: configs.Default(), Model: model, In: inR, Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		inW.Close()
		c.Wait(context.Background())
	}()
	a, ctx := c.agent, context.Background()
	s, err := a.NewSession(ctx, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	prompt := func(text string) acp.PromptRequest {
		return acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(text)}}
	}
	if r, err := a.Prompt(ctx, prompt("ping")); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("ping: %+v %v", r, err)
	}
	done := make(chan acp.StopReason, 1)
	go func() {
		r, _ := a.Prompt(ctx, prompt("slow"))
		done <- r.StopReason
	}()
	sess := a.live(string(s.SessionId))
	for deadline := time.Now().Add(testwait.Hang); ; time.Sleep(time.Millisecond) {
		if st, _ := sess.State(); st != nil && st.History[len(st.History)-1].Content == "slow" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow turn never started")
		}
	}
	if err := a.Cancel(ctx, acp.CancelNotification{SessionId: s.SessionId}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r != acp.StopReasonCancelled {
			t.Fatalf("slow: %s", r)
		}
	case <-time.After(testwait.Hang):
		t.Fatal("Cancel did not end the turn")
	}
}
