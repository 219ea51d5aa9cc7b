package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestModelKeysFromConfig: model.retries and model.idleTimeout, written in
// the user's config, reach the real process's model calls. The idle
// timeout ends a stream that never goes on (the script's stall), its only
// way out; it is long enough (10 s) that a ping's answer from the test's
// server is never taken for a stall on a loaded machine.
func TestModelKeysFromConfig(t *testing.T) {
	testwait.Short(t, "a model.idleTimeout of 10 s")
	conn, _, srv := startMM(t, "  idleTimeout: 10s\n  retries: 1\n")
	ctx, _, sess := openSession(t, conn)

	srv.FailNext(1, 503, "0")
	if res, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("%v %v", res, err)
	}
	var thought string
	for _, u := range conn.Client.Updates(sess.SessionId) {
		if u.AgentThoughtChunk != nil {
			thought += u.AgentThoughtChunk.Content.Text.Text
		}
	}
	if !strings.HasPrefix(thought, "model server busy (HTTP 503), retrying in 0 ms (retry 1 of 1)") {
		t.Errorf("thought %q", thought)
	}

	// One retry only: the second refusal is the turn's error.
	srv.FailNext(2, 503, "0")
	_, err := conn.Ask(ctx, sess.SessionId, "ping")
	var re *acp.RequestError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "after 1 retry") {
		t.Errorf("err = %v, want the 503 after 1 retry", err)
	}

	_, err = conn.Ask(ctx, sess.SessionId, "stall")
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "no answer for 10s (model.idleTimeout)") {
		t.Errorf("err = %v, want the idle timeout", err)
	}
	if res, err := conn.Ask(ctx, sess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("after the stall: %v %v", res, err)
	}
}
