package main

import (
	"net/http"
	"testing"

	"github.com/coder/acp-go-sdk"
)

// BenchmarkWebSocketTurn: one ping turn over WebSocket on a connection
// that says it will resume (Acp-Resume: 1: mm numbers and keeps every
// frame it writes) and on one that does not.
//
//	go test -run '^$' -bench WebSocketTurn -benchtime 2000x -count 3 ./cmd/mm
func BenchmarkWebSocketTurn(b *testing.B) {
	ctx := b.Context()
	s := startServe(b, "")
	for _, c := range []struct {
		name   string
		header http.Header
	}{
		{"plain", nil},
		{"resumable", http.Header{"Acp-Resume": {"1"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			w := s.wireWith(b, c.header)
			res, err := w.NewSession(ctx, acp.NewSessionRequest{Cwd: s.project(b), McpServers: []acp.McpServer{}})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if r, err := w.ask(ctx, res.SessionId, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
					b.Fatalf("ping: %v %v", r, err)
				}
			}
		})
	}
}
