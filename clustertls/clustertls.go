// Package clustertls is how the nodes of mm's cluster prove to each other
// that they are members: mutual TLS, every node's certificate signed by
// the cluster's own CA (cluster.tls). Any certificate that CA signed is a
// member; nothing else is. Load makes the TLS configs of a node's remote
// and health endpoint, both sides; Generate makes a set of files for a new
// cluster (`mm cluster-certs DIR`).
//
// A peer's certificate is checked against the CA, not against a host
// name: nodes are reached by whatever address the membership gives
// (hostnames, pod IPs, loopback in tests), and membership, not a name, is
// what the certificate proves.
package clustertls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/mm-agent/mm/configs"
)

// The files Generate writes, in its folder.
const (
	CAFile   = "ca.pem"
	CertFile = "node.pem"
	KeyFile  = "node-key.pem"
)

// Load reads cfg's files and returns the TLS config of a node's servers
// (the remote, the health endpoint), which require a client certificate
// the CA signed, and of its clients (dials to other nodes), which present
// the node's certificate and accept a server's only if the CA signed it.
func Load(cfg configs.ClusterTLS) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls: the node's certificate and key: %w", err)
	}
	caPEM, err := os.ReadFile(cfg.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("cluster.tls.ca: %s holds no PEM certificate", cfg.CA)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls.cert: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("cluster.tls: the node's certificate is not signed by cluster.tls.ca: %w", err)
	}
	// Both sides check the peer's chain against the CA alone, the same way
	// (VerifyConnection, which runs on every connection, resumed ones
	// too): a member is whoever the CA signed, at any address, whatever
	// usages its certificate names.
	check := func(cs tls.ConnectionState) error { return verify(cs.PeerCertificates, pool) }
	server = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: check,
	}
	client = &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection checks the chain
		VerifyConnection:   check,
	}
	return server, client, nil
}

// errNoCertificate refuses a peer that showed none.
var errNoCertificate = errors.New("the peer showed no certificate")

// verify checks a peer's chain against the cluster's CA.
func verify(certs []*x509.Certificate, pool *x509.CertPool) error {
	if len(certs) == 0 {
		return errNoCertificate
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// Generate writes a new cluster CA's certificate (CAFile) and one node
// certificate it signed, with its key (CertFile, KeyFile), valid for
// valid, into dir (made if missing, 0700; the key 0600). Every node of the
// cluster can use that one certificate. The CA's own key is not kept: no
// one can sign another member later; a cluster that needs new
// certificates makes a new set and gives it to every node.
func Generate(dir string, valid time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{CAFile, CertFile, KeyFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%s exists already: mm does not overwrite a cluster's certificates", filepath.Join(dir, f))
		}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "mm cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	node := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "mm node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, node, caCert, &nodeKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(nodeKey)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(dir, CAFile), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, CertFile), "CERTIFICATE", nodeDER, 0o644); err != nil {
		return err
	}
	return write(filepath.Join(dir, KeyFile), "PRIVATE KEY", keyDER, 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func write(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
