package grains

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/logs"
)

// TestProtoLog: protoactor's lines that a cluster's normal life brings are
// kept out of the way; the others are kept.
func TestProtoLog(t *testing.T) {
	m := &Member{cfg: configs.Cluster{FailureTimeout: 2 * time.Second}, live: []string{"10.0.0.1:4020"}, liveIDs: map[string]bool{"id1": true}}
	var out bytes.Buffer
	var ref atomic.Pointer[Member]
	ref.Store(m)
	log := protoLog(logs.New(&out, slog.LevelInfo), &ref)
	lost := status.Error(codes.Unavailable, "error reading from server: EOF")
	for _, tc := range []struct {
		name    string
		level   slog.Level
		msg     string
		args    []any
		want    string // "" = nothing logged
		leaving bool
	}{
		{"info", slog.LevelInfo, "Started Cluster Gossip", nil, "", false},
		{"a real error", slog.LevelError, "Failed to start gossip actor", []any{"error", errors.New("x")}, "ERROR: Failed to start gossip actor lib=protoactor error=x", false},
		{"gossip while joining", slog.LevelWarn, "Got gossip request from unknown member", []any{"MemberId", "x1"}, "", false},
		{"member lost", slog.LevelError, "EndpointWriter lost connection", []any{"address", "10.0.0.1:4020", "error", lost}, "ERROR: EndpointWriter lost connection", false},
		{"member gone", slog.LevelError, "EndpointWriter lost connection", []any{"address", "10.0.0.2:4020", "error", lost}, "", false},
		{"closed here", slog.LevelError, "EndpointWriter lost connection", []any{"address", "10.0.0.1:4020", "error", status.Error(codes.Canceled, "closing")}, "", false},
		{"reconnect to a member", slog.LevelError, "EndpointWriter failed to connect", []any{"address", "10.0.0.1:4020", "error", lost}, "ERROR: EndpointWriter failed to connect", false},
		{"reconnect to a member gone", slog.LevelError, "EndpointWriter failed to connect", []any{"address", "10.0.0.2:4020", "error", lost}, "", false},
		{"gossip to a member", slog.LevelWarn, "sendGossipForMember failed", []any{"MemberId", "id1"}, "WARN: sendGossipForMember failed", false},
		{"gossip to a member gone", slog.LevelWarn, "sendGossipForMember failed", []any{"MemberId", "id2"}, "", false},
		{"leaving, member lost", slog.LevelError, "EndpointWriter lost connection", []any{"address", "10.0.0.1:4020", "error", lost}, "", true},
	} {
		out.Reset()
		m.leaving.Store(tc.leaving)
		log.Log(t.Context(), tc.level, tc.msg, tc.args...)
		got := strings.TrimSpace(out.String())
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: logged %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestSeen: a lasting condition is warned of once a minute, after it has
// lasted its delay; one that stopped starts anew.
func TestSeen(t *testing.T) {
	s := &seen{keys: map[string]*seenKey{}}
	if !s.warn("a", 0, time.Hour) || s.warn("a", 0, time.Hour) {
		t.Error("warned of a at once: want once")
	}
	if s.warn("b", time.Hour, time.Hour) {
		t.Error("warned of b before its delay")
	}
	s.keys["a"].warned = time.Now().Add(-warnEvery)
	if !s.warn("a", 0, time.Hour) {
		t.Error("a lasting a minute more: no second warning")
	}
	s.keys["a"].last = time.Now().Add(-2 * time.Hour)
	s.keys["a"].warned = time.Now()
	if !s.warn("a", 0, time.Hour) {
		t.Error("a back after a quiet spell is not new")
	}
}
