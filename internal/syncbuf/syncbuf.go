// Package syncbuf is a bytes.Buffer that goroutines may write and read at
// once: the log of a process, a pipe's copy, what a test records. Every
// method is safe for concurrent use.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer records what is written to it.
type Buffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	off    bool
}

// Write records p (unless Off was called).
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.off {
		return len(p), nil
	}
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Lines returns what was written so far as lines, without the last
// newline; none when nothing was.
func (s *Buffer) Lines() []string {
	text := strings.TrimRight(s.String(), "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// Writes counts the calls to Write.
func (s *Buffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Off stops recording and forgets what was recorded (a benchmark measures
// the process's memory, not the recording's).
func (s *Buffer) Off() {
	s.mu.Lock()
	s.off = true
	s.b = bytes.Buffer{}
	s.mu.Unlock()
}
