package stress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mm-agent/mm/app"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/llm"
)

// agent is one connection the harness talks to mm on.
type agent struct {
	conn  *rpc
	close func() error // ends the connection and waits for what it needs (a subprocess's end)
}

// fleet is what a run drives: the connections its sessions are spread
// over, and what serves them, whose memory the run measures.
type fleet struct {
	agents []*agent
	mode   string
	// memory names where the memory figures come from.
	memory string
	// rss is the resident memory of what serves the sessions, now (0:
	// unknown); hwm, when not nil, is its high-water mark as the system
	// keeps it, else the run samples rss.
	rss, hwm func() int64
	// cpu, when not nil, is the CPU time (user and system) what serves
	// the sessions has used so far; in process it is this process's, the
	// harness's included, so it is nil.
	cpu func() time.Duration
	// rssStart is rss before any connection was opened (0: not measured).
	rssStart int64
	// sample is how often rss is sampled for the peak (0: 50ms).
	sample time.Duration
	// goroutinesLeft, when not nil, says how many more goroutines than
	// before the run are left once every connection is closed: beyond
	// what the agent keeps for reuse by design (left), and kept.
	goroutinesLeft func() (left, kept int)
	// stop, when not nil, ends what serves the agents once they are closed.
	stop func() error
	// grains, when not nil, is each cluster node's count of session
	// grains now (-1: unknown).
	grains func() []int
	// kill, when not nil, kills a node of the run's cluster (-kill-node)
	// and returns its index.
	kill func() (int, error)
}

// close ends the agents and what serves them, for a run that cannot go on.
func (f *fleet) close() {
	for _, a := range f.agents {
		_ = a.close()
	}
	if f.stop != nil {
		_ = f.stop()
	}
}

// mmConfig is the YAML config for the run's agents.
func mmConfig(c *Config, scriptPath string) string {
	cfg := fmt.Sprintf("model:\n  provider: scripted\n  script: %q\nturns:\n  concurrency: %d\nsessions:\n  enabled: %t\n",
		scriptPath, c.Concurrency, c.Persist)
	if c.Store != "" {
		cfg += fmt.Sprintf("store:\n  url: %q\n", c.Store)
	}
	return cfg
}

// writeConfig writes the scripted model's script and mm's config for the
// run into dir, and returns the config's path. extra is appended to the
// config (top-level sections).
func writeConfig(c *Config, dir, extra string) (string, error) {
	scriptPath := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(scriptPath, []byte(script(c)), 0o644); err != nil {
		return "", err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(mmConfig(c, scriptPath)+extra), 0o644); err != nil {
		return "", err
	}
	return cfgPath, nil
}

// startFleet starts or reaches the run's agents, all sharing one client.
func startFleet(ctx context.Context, c *Config, dir, marker string, cl *client, errs *errorKinds) (*fleet, error) {
	if c.URL != "" || c.Serve != "" {
		return startServed(ctx, c, dir, marker, cl, errs)
	}
	cfgPath, err := writeConfig(c, dir, "")
	if err != nil {
		return nil, err
	}
	if c.Procs == 0 {
		goroutines0 := runtime.NumGoroutine()
		cfg, err := configs.Load(cfgPath)
		if err != nil {
			return nil, err
		}
		model, err := llm.New(llm.Config{Provider: "scripted", Script: filepath.Join(dir, "script.yaml")})
		if err != nil {
			return nil, err
		}
		a, err := inProcess(cfg, model, cl)
		if err != nil {
			return nil, err
		}
		self := func() int64 { return procStatus(0, "VmRSS") }
		return &fleet{agents: []*agent{a}, mode: "in-process", memory: "this process", rss: self,
			hwm:            func() int64 { return procStatus(0, "VmHWM") },
			goroutinesLeft: func() (int, int) { return goroutinesLeft(goroutines0), 0 }}, nil
	}
	f := &fleet{mode: fmt.Sprintf("%d subprocess(es) over pipes", c.Procs), memory: "the subprocesses (/proc)"}
	var pids []int
	for i := 0; i < c.Procs; i++ {
		a, pid, err := subprocess(c.MM, cfgPath, marker, cl)
		if err != nil {
			for _, a := range f.agents {
				_ = a.close()
			}
			return nil, err
		}
		f.agents = append(f.agents, a)
		pids = append(pids, pid)
	}
	f.cpu = func() time.Duration {
		var d time.Duration
		for _, pid := range pids {
			d += procCPU(pid)
		}
		return d
	}
	f.rss = func() int64 {
		var n int64
		for _, pid := range pids {
			n += procStatus(pid, "VmRSS")
		}
		return n
	}
	return f, nil
}

func inProcess(cfg *configs.Config, model llm.Model, cl *client) (*agent, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c, err := app.Start(app.Options{Config: cfg, Model: model, In: inR, Out: outW, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		c.Wait(contextBackground())
		outW.Close()
		close(done)
	}()
	conn := newClientConn(cl, lines(inW, outR))
	go func() {
		// A client connection that gave up must not leave mm blocked
		// writing to it.
		<-conn.done
		outR.CloseWithError(io.ErrClosedPipe)
	}()
	return &agent{conn: conn, close: func() error {
		_ = conn.close()
		inW.Close()
		<-done
		return nil
	}}, nil
}

func subprocess(bin, cfgPath, marker string, cl *client) (*agent, int, error) {
	cmd := exec.Command(bin, "-acp", "-config", cfgPath)
	cmd.Env = append(os.Environ(), markerEnv+"="+marker, stateEnv(filepath.Dir(cfgPath)))
	// nil: the null device itself, not a pipe this process would have to
	// drain (mm logs a line per turn).
	stdin, stdout, err := startPiped(cmd, nil)
	if err != nil {
		return nil, 0, err
	}
	conn := newClientConn(cl, lines(stdin, stdout))
	return &agent{conn: conn, close: func() error {
		_ = conn.close()
		stdin.Close()
		return cmd.Wait()
	}}, cmd.Process.Pid, nil
}

// startPiped starts cmd with pipes to its stdin and stdout.
func startPiped(cmd *exec.Cmd, stderr io.Writer) (io.WriteCloser, io.ReadCloser, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return stdin, stdout, nil
}

// newClientConn connects the harness's client to an agent.
func newClientConn(cl *client, t transport) *rpc {
	return newRPC(t, cl.update, cl.permission)
}

// procStatus reads a field (in KiB) of /proc/<pid>/status; pid 0 is self.
func procStatus(pid int, field string) int64 {
	p := "/proc/self/status"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n * 1024
		}
	}
	return 0
}

// procCPU is the CPU time (user and system) a process has used, from
// /proc/<pid>/stat, in clock ticks of 10 ms (USER_HZ is 100 on Linux, as
// prometheus/procfs takes it too).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The fields after the command's name, in parentheses: state is the
	// first, utime the 12th, stime the 13th.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// selfCPU is the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// markerEnv is set in the environment of the run's agents, and so of every
// command they start: a live process that carries it after the agents are
// closed was left behind.
const markerEnv = "MMSTRESS_RUN"

// stateEnv gives the mm a run starts the run's own state folder (the
// folders' owners, the index of project folders, the session key), in its
// folder dir: a run leaves the user's ~/.local/state/mm as it found it,
// and starts from an empty one whatever runs came before (the record of
// folders' owners grew by a few hundred folders a run, and a claim reads
// and writes it whole). The nodes of a cluster share it, as they share
// the run's folder.
func stateEnv(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return "XDG_STATE_HOME=" + filepath.Join(dir, "state")
}

// leftovers lists the live (non-zombie) processes, other than this one,
// whose environment carries the run's marker.
func leftovers(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	needle := []byte(markerEnv + "=" + marker + "\x00")
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			s := string(st)
			if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && s[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}
