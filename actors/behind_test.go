package actors

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/store"
)

// TestGoneOnlyOnceFinal: a session that ends is gone (its actor stopped)
// only once its file is final, and a work behind it (Behind: a close's
// answer, a delete, a load) starts only then, in its own mailbox; the work
// after that one starts once that one is done.
func TestGoneOnlyOnceFinal(t *testing.T) {
	cfg := configs.Default()
	cfg.Sessions.Enabled = true
	model, err := llm.New(llm.Config{Provider: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	// Its writers hold every save after the first until release is
	// closed, as a slow disk or database would.
	var held atomic.Int32
	release := make(chan struct{})
	st := &hookStore{FileStore: store.NewFileStore(cfg.Sessions.Dir, nil, nil, nil), save: func(_ string, n int32) error {
		if n > 1 {
			held.Add(1)
			<-release
		}
		return nil
	}}
	out := &recOutbox{}
	rt := NewRuntime(Options{Config: cfg, Model: model, Out: out, Store: st})
	out.rt = rt
	t.Cleanup(rt.Shutdown)

	s := rt.SpawnSession(&SessionState{ID: "s1", Cwd: t.TempDir()}, Attachment{})
	if err := s.Flush(); err != nil { // the first save goes through
		t.Fatal(err)
	}
	s.SetMode(ModeAsk, out.reply("session/set_mode"), nil) // a change to save
	ended := s.End(false, nil)
	var order []string
	ran := make(chan string, 2)
	first := rt.Behind("s1", s, func() { ran <- "first" })
	rt.Behind("s1", first, func() { ran <- "second" })

	waitFor(t, func() bool { return held.Load() > 0 }) // the last save is held
	time.Sleep(50 * time.Millisecond)
	if s.Gone() {
		t.Fatal("the session's actor is gone while its last save is held")
	}
	select {
	case w := <-ran:
		t.Fatalf("the %s work ran before the session's file was final", w)
	default:
	}
	close(release)
	for range 2 {
		select {
		case w := <-ran:
			order = append(order, w)
		case <-time.After(testwait.Hang):
			t.Fatalf("the works behind the session did not run (ran %v)", order)
		}
	}
	if order[0] != "first" || order[1] != "second" {
		t.Fatalf("the works ran in the order %v", order)
	}
	if err := ended(); err != nil {
		t.Fatal(err)
	}
	if !s.Gone() {
		t.Fatal("the session's actor is not gone once the works behind it ran")
	}
}
