package protocol_test

import (
	"testing"
	"time"

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
	// The test's client, in this process, splits mm's messages with
	// jsonrpc.Parse too: its own are left out, counted once it has read
	// all mm wrote.
	mm := func() uint64 {
		for {
			all, client := jsonrpc.Parses(), conn.Parsed()
			time.Sleep(20 * time.Millisecond)
			if jsonrpc.Parses() == all && conn.Parsed() == client {
				return all - client
			}
		}
	}
	before := mm()
	for range prompts {
		if r := e.ask(conn, sid, "ping"); r.StopReason != "end_turn" {
			t.Fatalf("prompt: %v", r.StopReason)
		}
	}
	if n := mm() - before; n != prompts {
		t.Errorf("%d prompts on stdio were parsed %d times; want once each", prompts, n)
	}
}
