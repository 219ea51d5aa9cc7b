package stress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// serveProc is an `mm serve` the run started.
type serveProc struct {
	cmd    *exec.Cmd
	url    string // ws://127.0.0.1:PORT/acp
	tail   *tail  // the end of its stderr, for the errors
	exited chan error
	killed atomic.Bool // by the run (-kill-node): its end is no error
}

// listening is the line mm serve prints on stderr once it listens.
var listening = regexp.MustCompile(`^mm serve: listening on http(s?://\S+)\n?$`)

// startServeProc starts `bin serve -listen 127.0.0.1:0` with cfgPath in
// dir and waits for the line naming its address.
func startServeProc(ctx context.Context, bin, cfgPath, dir, marker, token string) (*serveProc, error) {
	// It starts in dir: a relative path is the caller's.
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, err
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "serve", "-listen", "127.0.0.1:0", "-config", cfgPath)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), markerEnv+"="+marker, "MM_SERVE_TOKEN="+token, stateEnv(dir))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &serveProc{cmd: cmd, tail: &tail{}, exited: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		// mm logs on stderr as it serves (a line per turn): read to the
		// end, keeping only the last lines, so that it never waits on a
		// full pipe.
		br := bufio.NewReader(stderr)
		for {
			line, err := br.ReadString('\n')
			_, _ = p.tail.Write([]byte(line))
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- "ws" + m[1]
				break
			}
			if err != nil {
				break
			}
		}
		_, _ = io.Copy(p.tail, br)
		p.exited <- cmd.Wait()
	}()
	select {
	case p.url = <-addr:
		return p, nil
	case err := <-p.exited:
		p.exited <- err
		return nil, fmt.Errorf("%s serve exited before listening (%v):\n%s", bin, err, p.tail)
	case <-time.After(30 * time.Second):
		_ = p.stop()
		return nil, fmt.Errorf("%s serve did not say where it listens within 30s:\n%s", bin, p.tail)
	case <-ctx.Done():
		_ = p.stop()
		return nil, ctx.Err()
	}
}

// kill ends mm serve at once (SIGKILL), as a host that dies.
func (p *serveProc) kill() error {
	p.killed.Store(true)
	return p.cmd.Process.Kill()
}

// stop sends SIGTERM and waits for mm serve to drain and exit (killing it
// after a minute, twice serve.drainTimeout's default).
func (p *serveProc) stop() error {
	if p.killed.Load() {
		p.exited <- <-p.exited
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		err = <-p.exited
		if err == nil {
			err = errors.New("killed")
		}
		err = fmt.Errorf("mm serve did not exit within a minute of SIGTERM: %w", err)
	}
	p.exited <- err // stop may be called again
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, p.tail)
	}
	return nil
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailBytes {
		t.buf = append(t.buf[:0], p[len(p)-tailBytes:]...)
	} else {
		t.buf = append(t.buf, p...)
		if len(t.buf) > tailBytes {
			t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
		}
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
