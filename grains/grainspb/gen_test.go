package grainspb

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// requireEnv, set to 1, makes a missing protoc or protoc-gen-go fail the
// test instead of skipping it (.ci/run installs both and sets it).
const requireEnv = "MM_REQUIRE_PROTOC"

// TestGeneratedCodeIsCurrent: grains.pb.go is what `go generate` makes of
// grains.proto, with the protoc and protoc-gen-go docs/cluster.md names.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	for _, bin := range []string{"protoc", "protoc-gen-go"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(requireEnv) == "1" {
				t.Fatalf("%s is not on PATH (%s=1)", bin, requireEnv)
			}
			t.Skipf("%s is not on PATH: docs/cluster.md says how to install it; %s=1 makes this a failure", bin, requireEnv)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("protoc", "--go_out="+out, "--go_opt=paths=source_relative", "grains.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	made, err := os.ReadFile(filepath.Join(out, "grains.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("grains.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	// The code does not depend on protoc's version, which its header names.
	protocLine := regexp.MustCompile(`(?m)^// \tprotoc +v.*$`)
	made, committed = protocLine.ReplaceAll(made, nil), protocLine.ReplaceAll(committed, nil)
	if !bytes.Equal(made, committed) {
		t.Errorf("grains.pb.go is not what protoc makes of grains.proto (%d bytes against %d): run go generate ./grains/... and commit it", len(committed), len(made))
	}
}
