//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
)

// TestPlantedSessionFiles: a repository ships .mm/sessions/<id>.json as a
// link to mm's own stdin or stdout, as a FIFO, or as a link to /dev/zero.
// session/list and session/load skip or refuse each one at once; the
// client's requests and mm's updates keep flowing, mm's memory stays small,
// and a second session's ping turns go on (turns.concurrency: 4) while it
// happens. The figures of each attack are logged.
func TestPlantedSessionFiles(t *testing.T) {
	attacks := []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"link to stdin", linkTo("/proc/self/fd/0")},
		{"link to stdout", linkTo("/proc/self/fd/1")},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"link to /dev/zero", linkTo("/dev/zero")},
		{"nothing planted (the baseline)", nil},
	}
	for _, at := range attacks {
		t.Run(at.name, func(t *testing.T) {
			conn, cmd, _ := startMM(t, persisted+"turns:\n  concurrency: 4\n")
			ctx, _, pingSess := openSession(t, conn)
			pid := cmd.Process.Pid
			watch := watchRSS(pid, 1<<30) // kills mm past 1 GiB
			defer watch.stop()

			project := t.TempDir()
			dir := filepath.Join(project, ".mm", "sessions")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			const id = "20260101-000000-0badf11e"
			if at.plant != nil {
				at.plant(t, filepath.Join(dir, id+".json"))
			}

			pings := startPinger(ctx, conn, pingSess.SessionId)
			waitTurns(t, pings, 1)
			rssBefore := watch.rss()

			// A request that hangs on the planted file (a FIFO opened
			// for reading) meets the test's bound on a hang, ctx's. The
			// attack is repeated while the second session's pings run,
			// so that their latency is measured during it.
			call := func(f func(context.Context) error) (time.Duration, error) {
				start := time.Now()
				err := f(ctx)
				return time.Since(start), err
			}
			// A fixed number of rounds, the same on any machine.
			const rounds = 200
			var listErr, loadErr error
			var listWorst, loadWorst time.Duration
			start := time.Now()
			round := 0
			for ; round < rounds && listErr == nil && !watch.killed(); round++ {
				took, err := call(func(c context.Context) error {
					res, err := conn.ListSessions(c, acp.ListSessionsRequest{Cwd: &project})
					if err == nil && len(res.Sessions) != 0 {
						err = fmt.Errorf("listed %+v", res.Sessions)
					}
					return err
				})
				listErr, listWorst = err, max(listWorst, took)
				took, err = call(func(c context.Context) error {
					_, err := conn.LoadSession(c, acp.LoadSessionRequest{SessionId: id, Cwd: project, McpServers: []acp.McpServer{}})
					return err
				})
				loadErr, loadWorst = err, max(loadWorst, took)
				var re *acp.RequestError
				if !errors.As(err, &re) || (re.Code != -32602 && re.Code != -32002) {
					break
				}
			}
			elapsed := time.Since(start)
			worst, turns, pingErr := pings.stop()
			t.Logf("%s: %d round(s) of list+load in %v (worst list %v, worst load %v; last load: %s); mm RSS %d MiB before, peak %d MiB; second session: %d ping turns, worst %v",
				at.name, round, elapsed.Round(time.Millisecond), listWorst.Round(time.Millisecond), loadWorst.Round(time.Millisecond), oneLineErr(loadErr),
				rssBefore>>20, watch.peak()>>20, turns, worst.Round(time.Millisecond))

			if watch.killed() {
				t.Fatalf("mm grew past 1 GiB (peak %d MiB) and was killed", watch.peak()>>20)
			}
			if listErr != nil {
				t.Errorf("session/list: %v", listErr)
			}
			if pingErr != nil {
				t.Errorf("the second session's ping during the attack: %v", pingErr)
			}
			var re *acp.RequestError
			if !errors.As(loadErr, &re) || (re.Code != -32602 && re.Code != -32002) {
				t.Errorf("session/load: %v, want invalid params or not found", loadErr)
			} else if msg, _ := re.Data.(map[string]any)["error"].(string); msg == "" || strings.Contains(msg, "\n") {
				t.Errorf("session/load error %q: want one line", msg)
			}
			// The client's next request and mm's updates still arrive.
			// (No ping turn of the pinger's is under way: its updates are
			// all in, and Reset forgets them.)
			conn.Client.Reset()
			if res, err := conn.Ask(ctx, pingSess.SessionId, "ping"); err != nil || res.StopReason != acp.StopReasonEndTurn {
				t.Fatalf("ping after the attack: %v %v", res, err)
			}
			if got := acptest.Text(conn.Client.Updates(pingSess.SessionId)); got != "pong" {
				t.Errorf("ping after the attack answered %q", got)
			}
			if at.plant != nil {
				var told []string
				for _, line := range strings.Split(conn.Stderr.String(), "\n") {
					if strings.Contains(line, id+".json") {
						told = append(told, line)
					}
				}
				// One warning, whatever the number of lists.
				if len(told) != 1 {
					t.Errorf("%d log lines name the planted file, want 1:\n%s", len(told), strings.Join(told, "\n"))
				} else {
					t.Logf("log: %s", told[0])
				}
			}
		})
	}
}

func linkTo(target string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
}

func oneLineErr(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// pinger runs ping turns back to back on one session and keeps the worst
// latency.
type pinger struct {
	quit, done chan struct{}
	mu         sync.Mutex
	worst      time.Duration
	turns      int
	err        error // the ping that failed, which ended the pings
}

func startPinger(ctx context.Context, conn *acptest.Conn, sid acp.SessionId) *pinger {
	p := &pinger{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.quit:
				return
			default:
			}
			start := time.Now()
			_, err := conn.Ask(ctx, sid, "ping")
			took := time.Since(start)
			p.mu.Lock()
			p.worst = max(p.worst, took)
			if err == nil {
				p.turns++
			} else {
				p.err = err
			}
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p
}

// waitTurns waits until p has done n turns (testwait.Hang at most).
func waitTurns(t *testing.T, p *pinger, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d ping turn(s) of the second session done", n), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.turns >= n || p.err != nil
	})
}

// stop ends the pings once the turn under way has ended: none is cut
// short, so that when stop returns, no ping turn is left to write updates
// the client would count as the next turn's.
func (p *pinger) stop() (worst time.Duration, turns int, err error) {
	close(p.quit)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.worst, p.turns, p.err
}

// rssWatch polls a process's resident memory and kills it past a limit,
// so that a test of an attack on memory cannot take the machine down.
type rssWatch struct {
	pid        int
	quit, done chan struct{}
	mu         sync.Mutex
	max        int64
	kill       bool
}

func watchRSS(pid int, limit int64) *rssWatch {
	w := &rssWatch{pid: pid, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			rss := procStatus(pid, "VmRSS:")
			w.mu.Lock()
			w.max = max(w.max, rss)
			if rss > limit && !w.kill {
				w.kill = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			w.mu.Unlock()
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *rssWatch) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
}

func (w *rssWatch) rss() int64 { return procStatus(w.pid, "VmRSS:") }

// peak is the largest resident size seen, or the kernel's high-water mark
// when that is larger (a spike between two polls).
func (w *rssWatch) peak() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.max, procStatus(w.pid, "VmHWM:"))
}

func (w *rssWatch) killed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kill
}

// procStatus reads one "kB" field of /proc/<pid>/status, in bytes; 0 when
// the process is gone.
func procStatus(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}
