package protocol_test

import (
	"testing"

	"github.com/mm-agent/mm/jsonrpc"
)

// TestOneParsePerPrompt: a prompt read on stdio is split into its
// JSON-RPC members once (jsonrpc.Lines → jsonrpc.Parse), and every step
// after — the method table, the session's order, the params' decode —
// reads that split. (The params are then decoded into the SDK's types,
// once: that is the prompt's decode, not another parse of the line.)
func TestOneParsePerPrompt(t *testing.T) {
	const prompts = 20
	e := newSessEnv(t, promptScript, nil)
	conn := e.agent()
	sid := e.newSession(conn)
	before := jsonrpc.Parses()
	for range prompts {
		if r := e.ask(conn, sid, "ping"); r.StopReason != "end_turn" {
			t.Fatalf("prompt: %v", r.StopReason)
		}
	}
	if n := jsonrpc.Parses() - before; n != prompts {
		t.Errorf("%d prompts on stdio were parsed %d times; want once each", prompts, n)
	}
}
