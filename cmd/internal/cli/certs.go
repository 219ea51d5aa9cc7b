package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/mm-agent/mm/clustertls"
)

// runClusterCerts is `mm cluster-certs [-days N] DIR`: a new cluster CA
// and one node certificate it signed, for every node of a cluster
// (cluster.tls; docs/cluster.md). It writes the three files into DIR and
// says on stderr which config keys name them.
func runClusterCerts(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm cluster-certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	days := fs.Int("days", 825, "how many days the certificates are valid")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mm cluster-certs [-days N] DIR\n\nwrites a new cluster CA (ca.pem) and one node certificate it signed (node.pem, node-key.pem) into DIR, for cluster.tls on every node")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 || *days < 1 {
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	if err := clustertls.Generate(dir, time.Duration(*days)*24*time.Hour); err != nil {
		fmt.Fprintf(stderr, "mm cluster-certs: %v\n", err)
		return 1
	}
	abs, _ := filepath.Abs(dir)
	fmt.Fprintf(stderr, "mm cluster-certs: wrote %s, %s and %s in %s, valid %d days.\nGive every node the three files (the key stays secret) and name them in its config:\n\ncluster:\n  tls:\n    cert: %s\n    key: %s\n    ca: %s\n",
		clustertls.CAFile, clustertls.CertFile, clustertls.KeyFile, abs, *days,
		filepath.Join(abs, clustertls.CertFile), filepath.Join(abs, clustertls.KeyFile), filepath.Join(abs, clustertls.CAFile))
	return 0
}
