// Package cutproxy is a TCP proxy for tests that can cut the way through
// and restore it: a database that goes away under a running server, a
// client whose network drops. Cut closes every connection through it and
// closes each new one as soon as it is accepted, as a peer that is down
// does; Restore lets connections through again.
//
// Concurrency: a Proxy is safe for concurrent use.
package cutproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards the connections its listener accepts to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	stalls map[net.Conn]bool // connections whose bytes go nowhere
	wg     sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target (host:port)
// until the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, stalls: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy, and every new one at once.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Stall makes every connection through the proxy a black hole, as a
// network that stops delivering without failing: what either side writes
// is taken and dropped, and neither side hears of it. New connections go
// through.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.stalls[c] = true
	}
}

func (p *Proxy) stalled(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalls[c]
}

// Retarget sends new connections to target (host:port) from now on, as
// a balancer that sends a client back to another node; connections open
// go on to the old target until they end.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Restore lets new connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track adds c to the connections Cut closes; false when the proxy went
// down meanwhile (c is closed then).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(up) {
		_ = c.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.stalled(src) {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	delete(p.stalls, c)
	delete(p.stalls, up)
	p.mu.Unlock()
}
