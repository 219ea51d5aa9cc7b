// Package gate holds an io.Reader's reads until it is opened.
//
// acp-go-sdk's connections start their reader goroutine in their
// constructor, and their SetLogger is not synchronised with it: setting the
// logger races with a first read that fails at once (a closed pipe). Giving
// the connection a gated reader, setting the logger, then opening the gate
// orders the two.
package gate

import "io"

// Reader is a gated io.Reader.
type Reader struct {
	r    io.Reader
	open chan struct{}
}

// New returns a closed gate in front of r.
func New(r io.Reader) *Reader { return &Reader{r: r, open: make(chan struct{})} }

// Open lets reads through. Call it once.
func (g *Reader) Open() { close(g.open) }

// Read waits for Open, then reads.
func (g *Reader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
