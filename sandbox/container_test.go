//go:build linux

package sandbox

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What mm says where a container engine leaves the sandbox less than it
// needs (docs/container.md): each case is made here as the engine makes
// it, with the machine's own bubblewrap, unshare and slirp4netns, and what
// mm says must name what mends it there, not an install that would not.

// probeEnv, set, makes TestProbe print what Detect and CheckNetwork say in
// the process it runs in (one made less privileged by the test that runs
// it), as JSON on a line of its own.
const probeEnv = "MM_SANDBOX_PROBE"

type probeResult struct {
	Kind    Kind   `json:"kind"`
	Why     string `json:"why"`
	Network string `json:"network"`
	// NetworkOff is what CheckNetwork says for commands with the network
	// off.
	NetworkOff string `json:"networkOff"`
}

func TestProbe(t *testing.T) {
	if os.Getenv(probeEnv) == "" {
		t.Skip("run by the tests below, in a process made less privileged")
	}
	s := Detect()
	r := probeResult{Kind: s.Kind(), Why: s.Why()}
	var u *Ident
	if os.Geteuid() == 0 {
		u = &Ident{UID: 65534, GID: 65534, Name: "nobody"}
	}
	if err := s.CheckNetwork(u, true); err != nil {
		r.Network = err.Error()
	}
	if err := s.CheckNetwork(u, false); err != nil {
		r.NetworkOff = err.Error()
	}
	b, _ := json.Marshal(r)
	os.Stdout.Write(append(append([]byte("\nPROBE "), b...), '\n'))
}

// probe runs TestProbe in a copy of this test binary (one every user may
// run) through prefix, with PATH path ("" leaves it), and returns what it
// said.
func probe(t *testing.T, prefix []string, path string) probeResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if out, err := exec.Command("cp", self, bin).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	args := append(append([]string{}, prefix...), bin, "-test.run=^TestProbe$", "-test.count=1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	if path != "" {
		cmd.Env = append(cmd.Env, "PATH="+path)
	}
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if j, ok := strings.CutPrefix(l, "PROBE "); ok {
			var r probeResult
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %+v", strings.Join(prefix, " "), r)
			return r
		}
	}
	t.Fatalf("the probe said nothing: %v\n%s", err, out)
	return probeResult{}
}

// needs skips the test unless it runs as root with the programs named.
func needs(t *testing.T, programs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("makes a container's conditions with root's privileges")
	}
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not on PATH", p)
		}
	}
}

// TestContainerMaskedProc: a container engine masks parts of /proc
// (/proc/kcore, /proc/keys, … under a mount of their own, /proc/sys
// read-only on one), and bubblewrap
// run by a user there cannot mount a /proc of its own ("Can't mount
// proc"). mm falls back to Landlock and says which option of the engine
// unmasks it, not to install bubblewrap. The mask is made as Podman makes
// /proc/sys read-only, a mount of its own, in a mount namespace of the
// test's; mm runs as nobody, as the image's user does.
func TestContainerMaskedProc(t *testing.T) {
	needs(t, "bwrap", "unshare", "setpriv")
	// bubblewrap as the engine leaves it: /proc/sys masked, run by a user.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	real, _ := exec.LookPath("bwrap")
	wrapper := "#!/bin/sh\nexec unshare --mount --propagation private -- sh -c 'mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec setpriv --reuid=65534 --regid=65534 --clear-groups -- \"$0\" \"$@\"' " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "bwrap"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	r := probe(t, nil, dir+":"+os.Getenv("PATH"))
	if r.Kind == Bubblewrap {
		t.Fatal("bubblewrap confines under a masked /proc: the test made no container's /proc")
	}
	for _, want := range []string{"Can't mount proc", "unmask=/proc/*", "systempaths=unconfined", "docs/container.md"} {
		if !strings.Contains(r.Why, want) {
			t.Errorf("Why does not say %q: %q", want, r.Why)
		}
	}
	if strings.Contains(r.Why, "apt-get install") {
		t.Errorf("Why says to install what is installed: %q", r.Why)
	}
}

// TestContainerRootWithoutCapabilities: mm run by root where root lacks
// CAP_SYS_ADMIN and CAP_NET_ADMIN, as in a container: bubblewrap cannot
// make its namespaces, nor mm a network namespace for the session. What
// mm says names the capabilities, or running mm as a user; not an install.
func TestContainerRootWithoutCapabilities(t *testing.T) {
	needs(t, "bwrap", "setpriv", "slirp4netns", "nsenter")
	r := probe(t, []string{"setpriv", "--bounding-set=-sys_admin,-net_admin", "--inh-caps=-sys_admin,-net_admin", "--"}, "")
	if r.Kind == Bubblewrap {
		t.Fatal("bubblewrap confines without CAP_SYS_ADMIN: the test took nothing away")
	}
	if r.Kind == Landlock && r.NetworkOff == "" {
		t.Error("CheckNetwork says Landlock's helper may make a network namespace without CAP_SYS_ADMIN")
	}
	for what, said := range map[string]string{"Why": r.Why, "CheckNetwork": r.Network, "CheckNetwork, the network off": r.NetworkOff} {
		for _, want := range []string{"CAP_SYS_ADMIN", "as a user", "docs/container.md"} {
			if !strings.Contains(said, want) {
				t.Errorf("%s does not say %q: %q", what, want, said)
			}
		}
		if strings.Contains(said, "install") {
			t.Errorf("%s says to install something: %q", what, said)
		}
	}
}

// TestContainerNoTun: a container has no /dev/net/tun unless the engine is
// given it, and slirp4netns cannot make the session's network without it.
// CheckNetwork says which option gives it.
func TestContainerNoTun(t *testing.T) {
	for _, p := range []string{"slirp4netns", "nsenter", "unshare"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not on PATH", p)
		}
	}
	old := tunPath
	tunPath = filepath.Join(t.TempDir(), "tun") // none there, as in a container
	t.Cleanup(func() { tunPath = old })
	err := Detect().CheckNetwork(tenant, true)
	if err == nil {
		t.Fatal("the session's network was made without a tun device")
	}
	for _, want := range []string{tunPath, "--device /dev/net/tun", "docs/container.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("does not say %q: %v", want, err)
		}
	}
}

// TestSessionCIDR: a session's own network does not take the network the
// machine is on (rootless Podman's containers and QEMU's guests are on
// slirp's 10.0.2.0/24 too), which would hide the machine's own addresses
// from its commands; DNS is its .3.
func TestSessionCIDR(t *testing.T) {
	for _, c := range []struct {
		addrs     []string
		cidr, dns string
	}{
		{[]string{"127.0.0.1", "192.168.1.20", "::1"}, "10.0.2.0/24", "10.0.2.3"},
		{[]string{"127.0.0.1", "10.0.2.100"}, "10.0.3.0/24", "10.0.3.3"},
		{[]string{"10.0.2.15", "10.0.3.7"}, "10.41.2.0/24", "10.41.2.3"},
		{[]string{"10.0.2.15", "10.0.3.7", "10.41.2.9", "172.31.254.1"}, "172.31.254.0/24", "172.31.254.3"},
	} {
		var ips []net.IP
		for _, a := range c.addrs {
			ips = append(ips, net.ParseIP(a))
		}
		if cidr, dns := sessionCIDR(ips); cidr != c.cidr || dns != c.dns {
			t.Errorf("on %v: %s, DNS %s; want %s, DNS %s", c.addrs, cidr, dns, c.cidr, c.dns)
		}
	}
}
