package lsp

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// pipes are the three pipes between mm and a server: each child end goes
// to the server and is closed here once it started.
type pipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func newPipes() (*pipes, error) {
	var p pipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	return &p, nil
}

func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.inR, p.outW, p.errW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeOurEnds() {
	for _, f := range []*os.File{p.inW, p.outR, p.errR} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeAll() {
	p.closeChildEnds()
	p.closeOurEnds()
}

// stdio is the server's stdin and stdout as the one stream jsonrpc2 wants.
// Closing it closes both, which also wakes a read or a write blocked on
// them.
type stdio struct {
	r *os.File // the server's stdout
	w *os.File // the server's stdin
	// wait bounds each chunk of a write: a server that leaves one unread
	// this long has stopped reading, and stalled is called. Every write is
	// bounded so, the answers to its requests included, which keeps a
	// write from holding a call, or the connection, for good.
	wait    time.Duration
	stalled func()
}

// writeChunk is what one deadline covers: less than a pipe holds, so that
// a server that reads, however slowly, is not taken for one that stopped.
const writeChunk = 4 << 10

func (s *stdio) Read(b []byte) (int, error) { return s.r.Read(b) }

func (s *stdio) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		end := min(len(b), n+writeChunk)
		_ = s.w.SetWriteDeadline(time.Now().Add(s.wait))
		m, err := s.w.Write(b[n:end])
		n += m
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.stalled()
			}
			return n, err
		}
	}
	return n, nil
}

func (s *stdio) Close() error {
	return errors.Join(s.w.Close(), s.r.Close())
}

// stderrLog sends a server's stderr to the debug log line by line, and
// keeps its last line for error messages. It reads at most maxStderr bytes
// a second while the server runs (budget); its lines take the log's budget
// (logBudget), and those left out are counted.
type stderrLog struct {
	log *slog.Logger
	// flood is told when the server keeps the budget full (server.misbehave).
	flood func(why string)
	// closed ends the pacing, once the server is reaped: what is left in
	// the pipe is read at once.
	closed    chan struct{}
	closeOnce sync.Once
	pace      budget // used by the one goroutine that writes

	mu      sync.Mutex
	partial []byte
	lastNon []byte
	lines   logBudget
}

// maxLine bounds a stderr line kept whole; a longer one is logged in parts.
const maxLine = 4 << 10

// maxStderr is the stderr read in a second. A server's log on stderr is a
// few KiB a second, its noisiest moments a few hundred.
const maxStderr = 4 << 20

func newStderrLog(log *slog.Logger, flood func(why string)) *stderrLog {
	closed := make(chan struct{})
	return &stderrLog{log: log, flood: flood, closed: closed,
		pace: budget{bytes: maxStderr, of: " of stderr", closed: closed, window: time.Now()}}
}

func (l *stderrLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			if len(l.partial) > maxLine {
				l.emit(l.partial)
				l.partial = l.partial[:0]
			}
			break
		}
		l.emit(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	l.mu.Unlock()
	select {
	case <-l.closed:
		return len(b), nil
	default:
	}
	l.pace.spend(0, int64(len(b)))
	if flood, _ := l.pace.wait(); flood != "" {
		l.flood(flood)
	}
	return len(b), nil
}

// close ends the pacing.
func (l *stderrLog) close() {
	l.closeOnce.Do(func() { close(l.closed) })
}

// flush logs an unfinished last line.
func (l *stderrLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.emit(l.partial)
		l.partial = nil
	}
}

// emit logs a line, within the budget, and keeps it as the last if it is
// not blank. l.mu is held.
func (l *stderrLog) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	l.lastNon = append(l.lastNon[:0], line...)
	if dropped, ok := l.lines.take(time.Now()); ok {
		if dropped > 0 {
			l.log.Debug("lsp: server stderr lines left out of the log", "count", dropped)
		}
		l.log.Debug("lsp: server stderr", "line", string(line))
	}
}

// last is the last non-empty line, shortened.
func (l *stderrLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return clip(strings.TrimSpace(string(l.lastNon)), 300)
}
