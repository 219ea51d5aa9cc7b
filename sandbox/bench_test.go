package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkBashTrue is one `bash -c true` as mm's bash tool starts it,
// unconfined and under workspace-write with bubblewrap and with Landlock
// (through this test binary as the helper): what confinement adds to each
// command. The "own-network" ones run in a session's own network (mm
// serve's, with the network on), made once for all the runs.
func BenchmarkBashTrue(b *testing.B) {
	cwd := b.TempDir()
	if tenant != nil {
		os.Chmod(filepath.Dir(cwd), 0o755)
		os.Chown(cwd, int(tenant.UID), int(tenant.GID))
	}
	run := func(b *testing.B, p Policy, s *Sandbox, want Kind, own bool) {
		if p.Confined() && s.Kind() != want {
			b.Skip(s.Why())
		}
		var net *Network
		if own {
			net = NewNetwork(tenant)
			defer net.Close()
			if _, _, err := net.ensure(); err != nil {
				b.Skip(err)
			}
		}
		for b.Loop() {
			cmd := exec.Command("bash", "-c", "true")
			cmd.Dir = cwd
			if p.Confined() {
				p.User = tenant
			}
			started, err := s.Wrap(cmd, p, net)
			if err != nil {
				b.Fatal(err)
			}
			err = cmd.Run()
			started()
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	ws := Policy{Mode: WorkspaceWrite, Network: true, Writable: []string{cwd}}
	off := ws
	off.Network = false
	b.Run("unconfined", func(b *testing.B) { run(b, Policy{}, Detect(), Unconfined, false) })
	b.Run("bubblewrap", func(b *testing.B) { run(b, ws, Detect(), Bubblewrap, false) })
	b.Run("bubblewrap-own-network", func(b *testing.B) { run(b, ws, Detect(), Bubblewrap, true) })
	b.Run("bubblewrap-network-off", func(b *testing.B) { run(b, off, Detect(), Bubblewrap, false) })
	b.Run("landlock", func(b *testing.B) { run(b, ws, LandlockOnly(), Landlock, false) })
	b.Run("landlock-own-network", func(b *testing.B) { run(b, ws, LandlockOnly(), Landlock, true) })
	b.Run("landlock-network-off", func(b *testing.B) { run(b, off, LandlockOnly(), Landlock, false) })
}
