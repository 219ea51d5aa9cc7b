package actors

import (
	"fmt"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/llm"
)

// BenchmarkTurn is a whole turn inside the actor system, without JSON or
// pipes: StartTurn, a slot from the serializer, a model actor on the
// scripted model, the reply. It is the scheduling cost every turn pays.
func BenchmarkTurn(b *testing.B) {
	rt, _ := newTestRuntime(b, "rules:\n  - match: \"^ping$\"\n    steps: [{text: pong}]\n")
	s := rt.SpawnSession(&SessionState{ID: "s", Cwd: b.TempDir()}, Attachment{})
	defer s.Stop()
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		if r := ask(s, "ping"); r.StopReason != acp.StopReasonEndTurn {
			b.Fatal(r)
		}
		if seq%50 == 0 {
			seq++
			ask(s, "/new") // keep the history short
		}
	}
}

// BenchmarkTurnParallel runs turns of 64 sessions at once with 64 slots:
// what the pool dispatcher and the serializer sustain.
func BenchmarkTurnParallel(b *testing.B) {
	rt, _ := newTestRuntime(b, "rules:\n  - match: \"^ping$\"\n    steps: [{text: pong}]\n")
	rt.cfg.Turns.Concurrency = 64
	b.ReportAllocs()
	b.SetParallelism(32)
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		i++
		s := rt.SpawnSession(&SessionState{ID: fmt.Sprintf("s%d", i), Cwd: b.TempDir()}, Attachment{})
		defer s.Stop()
		seq := uint64(0)
		for pb.Next() {
			seq++
			ask(s, "ping")
			if seq%50 == 0 {
				seq++
				ask(s, "/new")
			}
		}
	})
}

// BenchmarkSessionSpawn: a session actor started and stopped.
func BenchmarkSessionSpawn(b *testing.B) {
	rt, _ := newTestRuntime(b, "rules: []\n")
	cwd := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		rt.SpawnSession(&SessionState{ID: "s", Cwd: cwd}, Attachment{}).Stop()
	}
}

// The model request used to copy the history; it is now a capped view.
// These two show what that saved per model call on a 200-message history.
func history200() []history.Message {
	h := make([]history.Message, 200)
	for i := range h {
		h[i] = history.Message{Role: history.RoleUser, Content: "some text of a message"}
	}
	return h
}

func BenchmarkRequestHistoryCopy200(b *testing.B) {
	h := history200()
	b.ReportAllocs()
	for b.Loop() {
		_ = llm.Request{Messages: append([]history.Message(nil), h...)}
	}
}

func BenchmarkRequestHistoryView200(b *testing.B) {
	h := history200()
	b.ReportAllocs()
	for b.Loop() {
		_ = llm.Request{Messages: h[:len(h):len(h)]}
	}
}
