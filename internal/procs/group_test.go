package procs

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/mm-agent/mm/internal/testwait"
)

// helperVar tells the test binary, started by TestGroupKill, to play a
// command (a parent) or what it starts (a child) instead of running tests.
const helperVar = "PROCS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperVar) {
	case "parent":
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), helperVar+"=child")
		if err := child.Start(); err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString("ready\n")
		// Far longer than the test waits: only the kill ends them.
		time.Sleep(time.Hour)
		os.Exit(0)
	case "child":
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestGroupKill kills a command and the child it started with one Kill, on
// every system.
func TestGroupKill(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperVar+"=parent")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g := NewGroup(cmd)
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { g.Kill(); g.Close() }() // when the test fails midway
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the helper said %q", line)
	}
	if !g.hasLiving() {
		t.Fatal("the group has no living member before Kill")
	}
	g.Kill()
	_ = cmd.Wait()
	Done(cmd)
	g.WaitGone(time.Now().Add(testwait.Hang))
	if g.hasLiving() {
		t.Error("the group has a living member after Kill")
	}
}

func TestBashNotOnPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if err := NewGroup(Bash("true")).Start(); !errors.Is(err, ErrNoBash) {
		t.Errorf("got %v, want ErrNoBash", err)
	}
}
