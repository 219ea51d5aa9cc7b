package grains

import (
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/clustertls"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/grains/grainspb"
)

// TestStreamQueueBound: a node whose stream shakes hands and then reads
// nothing (frozen, or written to hurt) holds no more than streamQueue
// of what is sent to it before its connection is given up, however long
// cluster.failureTimeout lets a write wait: the links that wrote to it
// go through the remote.
func TestStreamQueueBound(t *testing.T) {
	dir := t.TempDir()
	if err := clustertls.Generate(dir, time.Hour); err != nil {
		t.Fatal(err)
	}
	server, client, err := clustertls.Load(configs.ClusterTLS{
		Cert: filepath.Join(dir, clustertls.CertFile), Key: filepath.Join(dir, clustertls.KeyFile), CA: filepath.Join(dir, clustertls.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.(*tls.Conn).Handshake()
		held <- c.(*tls.Conn) // and never read
	}()
	own, err := net.Listen("tcp", "127.0.0.1:0") // this node's, unused
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	s := &stream{log: log, ln: own, client: client, timeout: time.Hour,
		peers: map[string]*streamPeer{}, conns: map[net.Conn]bool{}, refused: &refusals{log: log}}
	defer s.Close()
	p, err := s.peer(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := <-held
	defer c.Close()
	big := &grainspb.Outs{Node: strings.Repeat("x", 1<<20)}
	sent := 0
	for ; sent < 4*streamQueue>>20; sent++ {
		if err = p.send(streamOuts, "edge", big); err != nil {
			break
		}
	}
	t.Logf("%d frames of 1 MiB sent to a peer that reads nothing, then: %v", sent, err)
	if err == nil || !strings.Contains(err.Error(), "reads too slowly") {
		t.Fatalf("after %d MiB to a peer that reads nothing: %v", sent, err)
	}
	if p.send(streamOuts, "edge", big) == nil {
		t.Error("a send after the connection was given up took its frame")
	}
	if !p.stale() {
		t.Error("a peer given up is not dialed again")
	}
}
