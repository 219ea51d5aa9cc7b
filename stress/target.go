package stress

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/llm"
	"github.com/mm-agent/mm/protocol"
)

// agent is one mm the harness talks to: in this process, or a subprocess.
type agent struct {
	conn  *rpc
	close func() error // closes the agent's stdin and waits for it to end
	pid   int          // the subprocess, 0 in-process
}

// mmConfig is the YAML config for the run's agents.
func mmConfig(c *Config, scriptPath string) string {
	return fmt.Sprintf("model:\n  provider: scripted\n  script: %q\nturns:\n  concurrency: %d\nsessions:\n  enabled: %t\n",
		scriptPath, c.Concurrency, c.Persist)
}

// startAgents starts the run's agents, all sharing one client.
func startAgents(c *Config, dir, marker string, cl *client) ([]*agent, error) {
	scriptPath := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(scriptPath, []byte(script(c)), 0o644); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(mmConfig(c, scriptPath)), 0o644); err != nil {
		return nil, err
	}
	if c.Procs == 0 {
		cfg, err := configs.Load(cfgPath)
		if err != nil {
			return nil, err
		}
		model, err := llm.New(llm.Config{Provider: "scripted", Script: scriptPath})
		if err != nil {
			return nil, err
		}
		a, err := inProcess(cfg, model, cl)
		if err != nil {
			return nil, err
		}
		return []*agent{a}, nil
	}
	var agents []*agent
	for i := 0; i < c.Procs; i++ {
		a, err := subprocess(c.MM, cfgPath, marker, cl)
		if err != nil {
			for _, a := range agents {
				_ = a.close()
			}
			return nil, err
		}
		agents = append(agents, a)
	}
	return agents, nil
}

func inProcess(cfg *configs.Config, model llm.Model, cl *client) (*agent, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c, err := protocol.Start(protocol.Options{Config: cfg, Model: model, In: inR, Out: outW, Log: slog.New(slog.DiscardHandler)})
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

func subprocess(bin, cfgPath, marker string, cl *client) (*agent, error) {
	cmd := exec.Command(bin, "-acp", "-config", cfgPath)
	cmd.Env = append(os.Environ(), markerEnv+"="+marker)
	// nil: the null device itself, not a pipe this process would have to
	// drain (mm logs a line per turn).
	stdin, stdout, err := startPiped(cmd, nil)
	if err != nil {
		return nil, err
	}
	conn := newClientConn(cl, lines(stdin, stdout))
	return &agent{conn: conn, pid: cmd.Process.Pid, close: func() error {
		_ = conn.close()
		stdin.Close()
		return cmd.Wait()
	}}, nil
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
func newClientConn(cl *client, w wire) *rpc {
	c := newRPC(w)
	c.onUpdate, c.onPermission = cl.update, cl.permission
	return c
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

// markerEnv is set in the environment of the run's agents, and so of every
// command they start: a live process that carries it after the agents are
// closed was left behind.
const markerEnv = "MMSTRESS_RUN"

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
