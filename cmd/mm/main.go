// Command mm is a bash-first coding agent that editors drive over the Agent
// Client Protocol on stdin/stdout (mm -acp), or, with `mm serve`, over the
// network; `mm connect` bridges an editor's stdin/stdout to a served mm.
//
// It is the binary an editor starts, so it links no cluster: `mm serve`
// whose config names one (cluster.name) runs mm-node, which is mm with the
// cluster (cmd/mm-node).
package main

import (
	"os"

	"github.com/mm-agent/mm/cmd/internal/cli"
	"github.com/mm-agent/mm/sandbox"
)

func main() {
	// mm is also the helper that confines a command with Landlock
	// (package sandbox): that process does nothing else.
	sandbox.Main()
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil))
}
