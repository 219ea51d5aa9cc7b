//go:build unix

package store

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashEnv tells a re-executed test binary to act as the writer to kill.
const crashEnv = "MM_STORE_CRASH_PATH"

// crashVersions are the two versions of the session the child alternates
// between: a ~200 KB one and a small one. Both processes build them the
// same way, so the parent knows the exact bytes a complete file must hold.
func crashVersions(tb testing.TB, id string) (big, small []byte) {
	big = mustMarshal(tb, file(id, 320, 500))
	s := file(id, 3, 50)
	s.Updated = s.Updated.Add(time.Hour)
	small = mustMarshal(tb, s)
	return big, small
}

// TestHelperWriter is not a test: run as a child of TestCrashSafety, it
// rewrites one session file in a tight loop until it is killed.
func TestHelperWriter(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("helper process for TestCrashSafety")
	}
	big, small := crashVersions(t, strings.TrimSuffix(filepath.Base(path), ".json"))
	for i := 0; ; i++ {
		data := big
		if i%2 == 1 {
			data = small
		}
		if err := WriteAtomic(path, data); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if i == 1 {
			// The parent starts its kill timer only now, so that every
			// kill lands in the writing loop, not in process start-up.
			fmt.Println("writing")
		}
	}
}

// TestCrashSafety kills writers with SIGKILL at random moments of their
// writing loop and checks after every kill that the file is one of the two
// versions, whole, and that List shows no temporary file. Several children
// run at once, each on its own file in one directory, to fit 200+ kills in
// a few seconds.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 200+ child processes")
	}
	const workers, killsEach = 4, 60
	cwd := t.TempDir()
	const dir = ".mm/sessions"

	var (
		mu       sync.Mutex
		total    int
		versions = map[string]int{}
	)
	big, small := crashVersions(t, "20260916-101530-crash000")
	t.Logf("versions: %d and %d bytes", len(big), len(small))
	var wg sync.WaitGroup
	for w := range workers {
		id := fmt.Sprintf("20260916-101530-crash%03d", w)
		path := Path(cwd, dir, id)
		big, small := crashVersions(t, id)
		if err := WriteAtomic(path, big); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for k := range killsEach {
				if err := killOnce(path, time.Duration(rng.Int64N(int64(20*time.Millisecond)))); err != nil {
					t.Errorf("%s kill %d: %v", id, k, err)
					return
				}
				got, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("%s kill %d: %v", id, k, err)
					return
				}
				which := ""
				switch {
				case bytes.Equal(got, big):
					which = "big"
				case bytes.Equal(got, small):
					which = "small"
				default:
					t.Errorf("%s kill %d: the file (%d bytes) is neither version", id, k, len(got))
					return
				}
				if f, err := Load(path); err != nil || f.ID != id {
					t.Errorf("%s kill %d: Load = %v", id, k, err)
					return
				}
				mu.Lock()
				total++
				versions[which]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	got, err := List(cwd, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != workers {
		t.Errorf("List returned %v, want the %d sessions only", ids(got), workers)
	}
	for _, s := range got {
		if !strings.Contains(s.ID, "crash") {
			t.Errorf("List returned %q", s.ID)
		}
	}
	entries, _ := os.ReadDir(Path(cwd, dir, ""))
	t.Logf("%d kills; file found big %d times, small %d times; %d temporary files left by killed writers",
		total, versions["big"], versions["small"], len(entries)-workers)
	if total < 200 {
		t.Errorf("only %d kills checked", total)
	}
}

// killOnce starts a writer child on path, waits until it is in its writing
// loop, lets it write for delay, kills it with SIGKILL and reaps it.
func killOnce(path string, delay time.Duration) error {
	return killHelper("TestHelperWriter", crashEnv+"="+path, delay)
}

// killHelper runs test as a child with env added, waits until it says it
// is writing, lets it write for delay, kills it with SIGKILL and reaps it.
func killHelper(test, env string, delay time.Duration) error {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "writing\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("child said %q, %v", line, err)
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("child ended with %v, not killed by SIGKILL", err)
	}
	return nil
}
