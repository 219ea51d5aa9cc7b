package clustertls

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mm-agent/mm/configs"
)

func set(t *testing.T) configs.ClusterTLS {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := Generate(dir, time.Hour); err != nil {
		t.Fatal(err)
	}
	return configs.ClusterTLS{Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile), CA: filepath.Join(dir, CAFile)}
}

// handshake runs one TLS handshake between a server and a client config
// over loopback, and returns the client's error and the server's.
func handshake(t *testing.T, server, client *tls.Config) (error, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer c.Close()
		serr <- c.(*tls.Conn).Handshake()
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		// TLS 1.3 tells a client of a refused certificate only on its
		// first read.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if err != nil && strings.Contains(err.Error(), "EOF") {
			err = nil
		}
		c.Close()
	}
	return err, <-serr
}

// TestMembersOnly: two nodes with certificates of the cluster's CA shake
// hands both ways; a peer with another CA's certificate, or with none, is
// refused by the node, and a node refuses a server with another CA's.
func TestMembersOnly(t *testing.T) {
	ours, theirs := set(t), set(t)
	srv, cli, err := Load(ours)
	if err != nil {
		t.Fatal(err)
	}
	if cerr, serr := handshake(t, srv, cli); cerr != nil || serr != nil {
		t.Fatalf("two members: client %v, server %v", cerr, serr)
	}
	_, stranger, err := Load(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if _, serr := handshake(t, srv, stranger); serr == nil {
		t.Error("a node took a peer with another cluster's certificate")
	}
	anon := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} //nolint:gosec // the stranger's side
	if _, serr := handshake(t, srv, anon); serr == nil {
		t.Error("a node took a peer with no certificate")
	}
	strangeServer, _, _ := Load(theirs)
	if cerr, _ := handshake(t, strangeServer, cli); cerr == nil {
		t.Error("a node talked to a server with another cluster's certificate")
	}
}

// TestLoadRefuses: a node's certificate another CA signed, a CA file with
// no certificate, and a set already there are refused with what is wrong.
func TestLoadRefuses(t *testing.T) {
	a, b := set(t), set(t)
	if _, _, err := Load(configs.ClusterTLS{Cert: a.Cert, Key: a.Key, CA: b.CA}); err == nil || !strings.Contains(err.Error(), "not signed by cluster.tls.ca") {
		t.Errorf("a certificate of another CA: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(empty, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(configs.ClusterTLS{Cert: a.Cert, Key: a.Key, CA: empty}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file with no certificate: %v", err)
	}
	if err := Generate(filepath.Dir(a.CA), time.Hour); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second set over the first: %v", err)
	}
	if fi, err := os.Stat(a.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key's mode: %v %v", fi.Mode(), err)
	}
}
