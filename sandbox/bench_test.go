package sandbox

import (
	"os/exec"
	"testing"
)

// BenchmarkBashTrue is one `bash -c true` as mm's bash tool starts it,
// unconfined and under workspace-write with bubblewrap: what confinement
// adds to each command.
func BenchmarkBashTrue(b *testing.B) {
	cwd := b.TempDir()
	run := func(b *testing.B, p Policy) {
		s := Detect()
		if p.Confined() && s.Kind() != Bubblewrap {
			b.Skip(s.Why())
		}
		for b.Loop() {
			cmd := exec.Command("bash", "-c", "true")
			cmd.Dir = cwd
			if err := s.Wrap(cmd, p); err != nil {
				b.Fatal(err)
			}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("unconfined", func(b *testing.B) { run(b, Policy{}) })
	b.Run("bubblewrap", func(b *testing.B) {
		run(b, Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}})
	})
	b.Run("bubblewrap-network-off", func(b *testing.B) {
		run(b, Policy{Mode: WorkspaceWrite, Network: false, Writable: []string{cwd}})
	})
}
