package tools

import (
	"context"
	"testing"
)

// TestBashNotOnPath: without a bash on PATH, the call fails with a message
// that tells the model and the user what to install.
func TestBashNotOnPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	env := Env{Cwd: t.TempDir()}
	c, err := Prepare(env, "bash", `{"command":"echo hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := Run(context.Background(), env, c)
	want := "[bash was not found on PATH: mm runs commands with bash (on Windows, install Git for Windows and put its bin folder on PATH)]"
	if !r.Failed || r.Output != want {
		t.Errorf("got %+v, want a failure %q", r, want)
	}
}
