package main

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/internal/testwait"
	"github.com/mm-agent/mm/store"
)

const persisted = "sessions:\n  enabled: true\n"

// TestKilledMidTurnThenLoaded: mm is killed with SIGKILL during a turn; a
// new mm loads the session and replays every turn that had ended.
func TestKilledMidTurnThenLoaded(t *testing.T) {
	conn, cmd, srv := startMM(t, persisted)
	ctx, cwd, sess := openSession(t, conn)
	sid := sess.SessionId
	if _, err := conn.Ask(ctx, sid, "ping"); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = conn.Ask(ctx, sid, "slow") }()
	waitUntil(t, "the slow turn asking the model", func() bool { return srv.Requests() >= 2 })
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = conn.Close(5 * time.Second)

	// A new mm, on the same config and model server, for the same user
	// (the same home, so the same key).
	next := exec.Command(mmBin, "-acp", "-config", cmd.Args[3])
	next.Env = cmd.Env
	again, err := acptest.Process(next)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Close(5 * time.Second) })
	if init, err := again.Init(ctx); err != nil || !init.AgentCapabilities.LoadSession {
		t.Fatalf("init: %v %+v", err, init)
	}
	res, err := again.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta["mm.sessionProvenance"] == nil {
		t.Error("no provenance in the load response")
	}
	ups := again.Client.Updates(sid)
	if len(ups) != 3 || ups[0].UserMessageChunk == nil || ups[0].UserMessageChunk.Content.Text.Text != "ping" ||
		ups[1].AgentMessageChunk == nil || ups[1].AgentMessageChunk.Content.Text.Text != "pong" || ups[2].AvailableCommandsUpdate == nil {
		t.Errorf("replay after SIGKILL = %+v", ups)
	}
	if r, err := again.Ask(ctx, sid, "ping"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Errorf("the loaded session does not work: %v %v", r, err)
	}
}

// TestRandomKillsLeaveLoadableFiles kills mm at random moments while its
// sessions are being rewritten, 200 times, and loads every session file.
func TestRandomKillsLeaveLoadableFiles(t *testing.T) {
	testwait.Short(t, "200 process kills")
	_, cmd, _ := startMM(t, persisted)
	_ = cmd.Process.Kill()
	cfg := cmd.Args[3]
	cwd := t.TempDir()
	for i := 0; i < 200; i++ {
		next := exec.Command(mmBin, "-acp", "-config", cfg)
		next.Env = cmd.Env // the test's home, never the user's
		conn, err := acptest.Process(next)
		if err != nil {
			t.Fatal(err)
		}
		proc := conn.Process()
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Hang)
		if _, err := conn.Init(ctx); err != nil {
			t.Fatal(err)
		}
		sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		// Turns back to back: every turn and every /new rewrites files.
		go func() {
			for j := 0; ctx.Err() == nil; j++ {
				text := "ping"
				if j%7 == 6 {
					text = "/new"
				}
				if _, err := conn.Ask(ctx, sess.SessionId, text); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
		_ = proc.Signal(syscall.SIGKILL)
		_ = conn.Close(5 * time.Second)
		cancel()
	}
	dir := filepath.Join(cwd, ".mm", "sessions")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		files++
		if _, err := store.Load(filepath.Join(dir, e.Name())); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
	if files < 200 {
		t.Errorf("only %d session files for 200 runs", files)
	}
	list, err := store.List(cwd, ".mm/sessions")
	if err != nil || len(list) != files {
		t.Errorf("List found %d of %d files: %v", len(list), files, err)
	}
	t.Logf("%d session files, all loadable", files)
}

// TestListWithoutCwdInANewProcess: session/list without a cwd, in a new
// process, lists the sessions of every folder mm has saved sessions in; a
// folder that is gone is dropped from the index.
func TestListWithoutCwdInANewProcess(t *testing.T) {
	state := t.TempDir()
	_, cmd, _ := startMM(t, persisted)
	_ = cmd.Process.Kill()
	cfg := cmd.Args[3]
	start := func() *acptest.Conn {
		c := exec.Command(mmBin, "-acp", "-config", cfg)
		c.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "XDG_STATE_HOME=" + state}
		conn, err := acptest.Process(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(5 * time.Second) })
		return conn
	}
	ctx := testwait.Context(t)
	first := start()
	if _, err := first.Init(ctx); err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	var ids []acp.SessionId
	for _, d := range dirs {
		res, err := first.NewSession(ctx, acp.NewSessionRequest{Cwd: d, McpServers: []acp.McpServer{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Ask(ctx, res.SessionId, "ping"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.SessionId)
	}
	// The next process reads what this one wrote at its exit.
	if err := first.Close(testwait.Hang); err != nil {
		t.Fatalf("the first mm's exit: %v", err)
	}

	list := func() map[acp.SessionId]string {
		conn := start()
		if _, err := conn.Init(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := conn.ListSessions(ctx, acp.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[acp.SessionId]string{}
		for _, s := range res.Sessions {
			got[s.SessionId] = s.Cwd
		}
		return got
	}
	got := list()
	if len(got) != 2 || got[ids[0]] != dirs[0] || got[ids[1]] != dirs[1] {
		t.Fatalf("a new process lists %v, want both sessions %v in %v", got, ids, dirs)
	}
	if err := os.RemoveAll(dirs[1]); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || got[ids[0]] != dirs[0] {
		t.Fatalf("after a folder went: %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(state, "mm", "folders"))
	if len(entries) != 1 {
		t.Errorf("the index holds %d folders, want 1", len(entries))
	}
}
