package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// againEnv makes the test binary a program that starts again in place
// (startAgain), as a node the cluster counted out does: "start" runs it,
// "remove" removes its file first (an upgrade took it); the program
// started again ("started") prints its pid and its name (comm).
const againEnv = "MM_TEST_START_AGAIN"

func TestMain(m *testing.M) {
	switch os.Getenv(againEnv) {
	case "remove":
		if err := os.Remove(os.Args[0]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fallthrough
	case "start":
		fmt.Printf("%d\n", os.Getpid())
		os.Setenv(againEnv, "started")
		os.Exit(startAgain(os.Stderr))
	case "started":
		keepName()
		comm, err := os.ReadFile("/proc/self/comm")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Printf("%d %s", os.Getpid(), comm)
		os.Exit(0)
	}
	// What the tests serve keeps its state (the folders' owners, the
	// index of project folders) in a folder of the run's, not in the
	// user's ~/.local/state/mm, which it would grow run after run.
	state, err := os.MkdirTemp("", "mm-state")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	code := m.Run()
	os.RemoveAll(state)
	os.Exit(code)
}

// startedAgain runs a copy of the test binary named mm-node, which starts
// again in place (mode: againEnv), and returns the name the kernel shows
// for it once started again.
func startedAgain(t *testing.T, mode string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/comm is Linux's")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "mm-node")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), againEnv+"="+mode)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v; stderr: %s", err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) != 3 {
		t.Fatalf("the program printed %q, want its pid, then its pid and name once started again; stderr: %s", out, stderr.String())
	}
	if _, err := strconv.Atoi(lines[0]); err != nil || lines[1] != lines[0] {
		t.Fatalf("pids %s and %s: startAgain must exec in place, the same pid", lines[0], lines[1])
	}
	return lines[2]
}

// TestStartAgainKeepsItsName: a node started again in place keeps its
// name (ps, top, a supervisor's pgrep), where exec'ing /proc/self/exe
// named it "exe".
func TestStartAgainKeepsItsName(t *testing.T) {
	if got := startedAgain(t, "start"); got != "mm-node" {
		t.Errorf("the program started again is named %q, want mm-node", got)
	}
}

// TestStartAgainAfterItsFileWent: the program's file removed (an upgrade
// replaced it), startAgain runs the same program (/proc/self/exe), and it
// takes its name back.
func TestStartAgainAfterItsFileWent(t *testing.T) {
	if got := startedAgain(t, "remove"); got != "mm-node" {
		t.Errorf("the program started again is named %q, want mm-node", got)
	}
}
