package llm_test

import (
	"context"
	"testing"

	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/llm/llmtest"
)

func benchmarkPing(b *testing.B, m llm.Model) {
	req := llm.Request{Messages: user("ping"), Temperature: -1}
	emit := func(llm.Delta) {}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := m.Stream(context.Background(), req, emit)
		if err != nil || resp.Text != "pong" {
			b.Fatalf("%q, %v", resp.Text, err)
		}
	}
}

// BenchmarkScriptedPing is one zero-latency "ping" → "pong" turn of the
// scripted model: the per-turn cost the stress harness pays.
func BenchmarkScriptedPing(b *testing.B) {
	benchmarkPing(b, scriptedModel(b, ""))
}

// BenchmarkScriptedPingParallel is the same on every core at once, as
// concurrent sessions share one Model.
func BenchmarkScriptedPingParallel(b *testing.B) {
	m := scriptedModel(b, "")
	req := llm.Request{Messages: user("ping"), Temperature: -1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if resp, err := m.Stream(context.Background(), req, func(llm.Delta) {}); err != nil || resp.Text != "pong" {
				b.Errorf("%q, %v", resp.Text, err)
				return
			}
		}
	})
}

// BenchmarkOpenAIPing is one "ping" turn of the openai provider against
// llmtest over loopback HTTP: client and server costs together.
func BenchmarkOpenAIPing(b *testing.B) {
	srv := llmtest.NewServer(nil)
	b.Cleanup(srv.Close)
	benchmarkPing(b, openAIModel(b, srv.URL()))
}
