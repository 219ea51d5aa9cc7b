package connect

import (
	"bufio"
	"errors"
	"io"
	"sync"
)

// lineOut is stdout: one message at a time, each one line.
type lineOut struct {
	mu   sync.Mutex
	w    *bufio.Writer
	buf  []byte // a piece of a frame on its way
	head []byte // the first headBytes of the last frame
	// whole is the last frame, when frame was asked to capture it, up to
	// maxCapture (nil past that); over is set once it went past.
	whole []byte
	over  bool
	// open is set while a frame's line is begun on stdout and not ended.
	open bool
}

// endLine ends a line a lost frame left begun on stdout, so that what
// comes next is a line of its own: the editor reads the broken one as
// one malformed line.
func (o *lineOut) endLine() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.open {
		return nil
	}
	o.open = false
	_ = o.w.WriteByte('\n')
	if err := o.w.Flush(); err != nil {
		return stdoutError{err}
	}
	return nil
}

// captured is the last frame read with capture, nil if it was larger than
// maxCapture. Valid until the next call of frame; called from the one
// goroutine that calls frame.
func (o *lineOut) captured() []byte {
	if o.over {
		return nil
	}
	return o.whole
}

// frame copies the message r reads to stdout as one line and returns its
// first headBytes (valid until the next call). A pretty-printed message's
// line breaks become spaces: in JSON they can only be whitespace between
// tokens (inside strings they are escaped), so the message means the
// same. The message is streamed, never held whole. Its first skip bytes
// are not written: they were, before a drop cut the frame off. n is how
// many bytes of the frame are on their way to stdout, the skipped ones
// included, when the socket fails.
func (o *lineOut) frame(r io.Reader, skip int, capture bool) (head []byte, n int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.head = o.head[:0]
	o.whole, o.over = o.whole[:0], false
	for {
		k, err := r.Read(o.buf)
		p := o.buf[:k]
		for i, c := range p {
			if c == '\n' || c == '\r' {
				p[i] = ' '
			}
		}
		if len(o.head) < headBytes {
			o.head = append(o.head, p[:min(k, headBytes-len(o.head))]...)
		}
		if capture && !o.over {
			if len(o.whole)+k > maxCapture {
				o.over = true
			} else {
				o.whole = append(o.whole, p...)
			}
		}
		if out := p[min(len(p), max(0, skip-n)):]; len(out) > 0 {
			o.open = true
			if _, werr := o.w.Write(out); werr != nil {
				return nil, n, stdoutError{werr}
			}
		}
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, n, err
		}
	}
	if n == 0 {
		return nil, 0, nil
	}
	o.open = false
	_ = o.w.WriteByte('\n')
	if err := o.w.Flush(); err != nil {
		return nil, n, stdoutError{err}
	}
	return o.head, n, nil
}

// line writes one line of mm connect's own (it ends in a newline).
func (o *lineOut) line(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(b)
	if err := o.w.Flush(); err != nil {
		return stdoutError{err}
	}
	return nil
}
