package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Network is a session's own network, for its commands with the network
// on: a network namespace, held by a process that does nothing else, with
// slirp4netns (user-mode networking) as its way out. A command in it
// reaches the outside as mm does, and none of this machine's loopback
// services (mm's ports, the cluster's, a local database): its 127.0.0.1
// is its own, and slirp4netns forwards nothing to the host's
// (--disable-host-loopback).
//
// It is made at the first command that needs it (a few milliseconds, once
// per session) and lasts until Close. Safe for concurrent use.
type Network struct {
	user *Ident // whom the commands run as; nil: mm's own user

	mu     sync.Mutex
	holder *exec.Cmd
	gone   chan struct{} // closed once the holder has ended
	hold   io.Closer     // the holder's stdin: closing it ends the holder
	slirp  *exec.Cmd
	exit   io.Closer // slirp4netns's --exit-fd: closing it ends slirp4netns
	dns    string    // the namespace's DNS server (slirp4netns's), for its resolv.conf
	closed bool
}

// NewNetwork is a session's own network, not made yet: its commands run as
// u (nil: as mm).
func NewNetwork(u *Ident) *Network { return &Network{user: u} }

// tunPath is the device slirp4netns opens to make the namespace's way out.
var tunPath = "/dev/net/tun"

// slirpTimeout bounds the wait for slirp4netns to be ready.
const slirpTimeout = 10 * time.Second

// ensure makes the network if it is not there yet and returns the pid of
// the process that holds its namespace, and the address of its DNS server
// for the commands' resolv.conf.
func (n *Network) ensure() (pid int, dns string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return 0, "", errors.New("the session's network is closed")
	}
	if n.holder != nil {
		select {
		case <-n.gone:
		default:
			return n.holder.Process.Pid, n.dns, nil
		}
	}
	n.stop()
	if err := n.start(); err != nil {
		n.stop()
		return 0, "", fmt.Errorf("the session's own network could not be made: %w", err)
	}
	return n.holder.Process.Pid, n.dns, nil
}

func (n *Network) start() error {
	slirp, err := exec.LookPath("slirp4netns")
	if err != nil {
		return errors.New("slirp4netns is not on PATH (Debian: apt-get install slirp4netns)")
	}
	if nsenterPath() == "" {
		return errors.New("nsenter is not on PATH (util-linux)")
	}
	if err := tunUsable(); err != nil {
		return err
	}
	root := os.Geteuid() == 0
	// The holder: cat, reading a pipe only mm writes to, so that it ends
	// with mm however mm ends. Run by root, the namespace is root's, and
	// nsenter joins it as root. Run by a user, it needs a user namespace of
	// its own, which maps the user to itself: util-linux's unshare makes
	// both and writes the map itself (mm, not dumpable once it confines,
	// could not write the map of a child it forked).
	cat, err := exec.LookPath("cat")
	if err != nil {
		return err
	}
	var holder *exec.Cmd
	if root {
		holder = exec.Command(cat)
		holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true}
	} else {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return errors.New("unshare is not on PATH (util-linux)")
		}
		// It says when its namespaces are made, and only then becomes cat.
		holder = exec.Command(unshare, "--user", "--map-current-user", "--net", "--", "/bin/sh", "-c", "echo; exec "+cat)
		holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	holder.Dir = "/"
	holder.Env = []string{}
	var said io.Reader
	var holderErr limitedBuffer
	if !root {
		if said, err = holder.StdoutPipe(); err != nil {
			return err
		}
		holder.Stderr = &holderErr
	}
	in, err := holder.StdinPipe()
	if err != nil {
		return err
	}
	if err := holder.Start(); err != nil {
		in.Close()
		if root && errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("a network namespace: %v; %s", err, containerRoot)
		}
		return fmt.Errorf("a network namespace: %v", err)
	}
	gone := make(chan struct{})
	n.holder, n.hold, n.gone = holder, in, gone
	if said != nil {
		// Wait reads nothing more of the pipe, so this read comes first.
		if _, err := said.Read(make([]byte, 1)); err != nil {
			_ = holder.Wait()
			msg := strings.Join(strings.Fields(holderErr.String()), " ")
			if msg == "" {
				msg = err.Error()
			}
			// unshare, run by a user, makes a user namespace first.
			return fmt.Errorf("a network namespace: %s; user namespaces are not allowed here: a container engine's seccomp filter (Docker: --security-opt seccomp=unconfined; docs/container.md), or the kernel (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)", msg)
		}
	}
	go func() {
		_ = holder.Wait()
		close(gone)
	}()
	pid := strconv.Itoa(holder.Process.Pid)

	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return err
	}
	cidr, dns := sessionCIDR(localAddrs())
	args := []string{"--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp",
		"--cidr=" + cidr, "--ready-fd=3", "--exit-fd=4"}
	if root {
		// Run by root, slirp4netns, which reads the tenants' packets,
		// pivots into an empty root and drops its capabilities. Run by a
		// user it holds none to drop, and its sandbox would need root
		// mapped in the holder's user namespace.
		args = append(args, "--enable-sandbox")
	} else {
		args = append(args, "--userns-path=/proc/"+pid+"/ns/user")
	}
	args = append(args, pid, "tap0")
	s := exec.Command(slirp, args...)
	s.Dir = "/"
	s.Env = []string{}
	s.ExtraFiles = []*os.File{readyW, exitR}
	s.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out limitedBuffer
	s.Stdout, s.Stderr = &out, &out
	err = s.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return fmt.Errorf("slirp4netns: %v", err)
	}
	n.slirp, n.exit = s, exitW
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := ready.Read(b)
		got <- err
	}()
	slirpSaid := func() string {
		said := strings.Join(strings.Fields(out.String()), " ")
		if root && strings.Contains(said, "TUNSETIFF") && strings.Contains(said, "not permitted") {
			said += "; " + containerRoot
		}
		return said
	}
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("slirp4netns did not configure the namespace: %s", slirpSaid())
		}
	case err := <-done:
		return fmt.Errorf("slirp4netns ended: %v: %s", err, slirpSaid())
	case <-time.After(slirpTimeout):
		return fmt.Errorf("slirp4netns was not ready in %v", slirpTimeout)
	}
	// slirp4netns answers DNS at the network's .3; the machine's
	// resolv.conf may name a resolver on its loopback, which the
	// namespace's is not. Each command is handed its resolv.conf through a
	// pipe (bubblewrap's --ro-bind-data), not a file of mm's: a file would
	// outlive an mm that was killed, where the holder and slirp4netns end
	// with it.
	n.dns = dns
	return nil
}

// sessionCIDRs are the networks a session's own may have, slirp4netns's
// default first: the first that none of this machine's addresses is in.
// A machine that is itself behind slirp (rootless Podman's containers,
// QEMU's user networking) is on 10.0.2.0/24, and a session's network on
// the same would hide the machine's own addresses from its commands.
var sessionCIDRs = []string{"10.0.2.0/24", "10.0.3.0/24", "10.41.2.0/24", "172.31.254.0/24"}

// sessionCIDR picks the network of a session's own from sessionCIDRs (the
// last when every one is taken), and its DNS server, the .3 of it.
func sessionCIDR(addrs []net.IP) (cidr, dns string) {
	cidr = sessionCIDRs[len(sessionCIDRs)-1]
	for _, c := range sessionCIDRs {
		if _, n, _ := net.ParseCIDR(c); !slices.ContainsFunc(addrs, n.Contains) {
			cidr = c
			break
		}
	}
	ip, _, _ := net.ParseCIDR(cidr)
	ip = ip.To4()
	return cidr, net.IPv4(ip[0], ip[1], ip[2], 3).String()
}

// localAddrs are this machine's addresses (its network namespace's).
func localAddrs() []net.IP {
	as, _ := net.InterfaceAddrs()
	var out []net.IP
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out
}

// tunUsable says why slirp4netns could not open the tun device, which it
// opens as mm's user: nil when it can.
func tunUsable() error {
	f, err := os.OpenFile(tunPath, os.O_RDWR, 0)
	switch {
	case err == nil:
		f.Close()
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("slirp4netns needs %s, and there is none here (a container has none unless the engine is given it: --device /dev/net/tun; docs/container.md)", tunPath)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("slirp4netns needs %s open to all (crw-rw-rw-, as udev makes it): %v", tunPath, err)
	case errors.Is(err, syscall.EPERM):
		return fmt.Errorf("slirp4netns needs %s, which this container may not use (--device /dev/net/tun; docs/container.md): %v", tunPath, err)
	}
	return fmt.Errorf("slirp4netns needs %s: %v", tunPath, err)
}

// stop ends what start made; n.mu is held.
func (n *Network) stop() {
	if n.exit != nil {
		n.exit.Close()
		n.exit = nil
	}
	if n.slirp != nil && n.slirp.Process != nil {
		_ = n.slirp.Process.Kill()
	}
	n.slirp = nil
	if n.hold != nil {
		n.hold.Close()
		n.hold = nil
	}
	if n.holder != nil && n.holder.Process != nil {
		_ = n.holder.Process.Kill()
	}
	n.holder = nil
	n.dns = ""
}

// Close ends the network: its holder and slirp4netns. Commands still in
// it keep their namespace, cut from the outside.
func (n *Network) Close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	n.stop()
}

// nsenterPath is util-linux's nsenter, "" when missing.
func nsenterPath() string {
	p, _ := exec.LookPath("nsenter")
	return p
}

// limitedBuffer keeps the first KiB written to it: what slirp4netns says
// when it fails.
type limitedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 1024 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// CheckNetwork says whether this machine can give commands the network on
// says, at a server's start rather than at a tenant's first command. On,
// it makes a session's own network for commands run as u, and ends it
// (slirp4netns and nsenter installed, network namespaces allowed). Off,
// under Landlock run by root, it makes a network namespace, which
// Landlock's helper makes for each command (root in a container may not);
// bubblewrap's was made when Detect tried it.
func (s *Sandbox) CheckNetwork(u *Ident, on bool) error {
	if on {
		n := NewNetwork(u)
		defer n.Close()
		_, _, err := n.ensure()
		return err
	}
	if s.kind != Landlock || os.Geteuid() != 0 {
		return nil
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Run(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("a network namespace of their own: %v; %s", err, containerRoot)
		}
		return fmt.Errorf("a network namespace of their own: %v", err)
	}
	return nil
}

// Protect makes this process unreadable to the commands it confines: not
// dumpable, its /proc/<pid>/environ, memory and file descriptors are
// root's, and a process of the same user cannot trace it.
func Protect() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
