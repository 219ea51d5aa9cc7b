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
// keeps its last line for error messages.
type stderrLog struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte
	lastNon string
}

// maxLine bounds a stderr line kept whole; a longer one is logged in parts.
const maxLine = 4 << 10

func (l *stderrLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			if len(l.partial) > maxLine {
				l.emit(l.partial)
				l.partial = l.partial[:0]
			}
			return len(b), nil
		}
		l.emit(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
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

func (l *stderrLog) emit(line []byte) {
	s := strings.TrimRight(string(line), "\r")
	if strings.TrimSpace(s) == "" {
		return
	}
	l.log.Debug("lsp: server stderr", "line", s)
	l.lastNon = s
}

// last is the last non-empty line, shortened.
func (l *stderrLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return clip(strings.TrimSpace(l.lastNon), 300)
}
