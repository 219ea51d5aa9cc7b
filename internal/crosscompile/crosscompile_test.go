package crosscompile

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCrossCompile builds mm for every system it supports, so that code
// that builds only on the machine at hand fails here, on any machine. It
// takes about a minute a target with a cold build cache (on 2 cores), a
// second or two with a warm one: building for other platforms is not a unit
// test, so it runs only when asked for, with MM_CROSSCOMPILE=1 (.ci/run sets
// it, and runs it at the lowest priority beside its other steps).
func TestCrossCompile(t *testing.T) {
	if os.Getenv("MM_CROSSCOMPILE") != "1" {
		t.Skip("builds mm for six targets: set MM_CROSSCOMPILE=1 to run it (.ci/run does)")
	}
	dir := t.TempDir()
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, goarch := range []string{"amd64", "arm64"} {
			t.Run(goos+"/"+goarch, func(t *testing.T) {
				// At most -test.parallel (the CPU count) builds at once.
				t.Parallel()
				out := filepath.Join(dir, "mm-"+goos+"-"+goarch)
				if goos == "windows" {
					out += ".exe"
				}
				cmd := exec.Command("go", "build", "-o", out, "-trimpath", "github.com/mm-agent/mm/cmd/mm")
				cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v\n%s", err, b)
				}
			})
		}
	}
}
