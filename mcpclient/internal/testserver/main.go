// Command testserver is an MCP stdio server for the tests of package
// mcpclient. The tests run it as a real process, so that starting, calling,
// cancelling, crashing and killing go through the same paths as with any
// server an editor names.
//
// With the argument "hang" it never answers, to test the time limit of a
// connection attempt; with "sleep" it only sleeps, as the background child
// that the spawn tool leaves behind; with "hostile MODE" it is mcptest's
// hostile server.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mm-agent/mm/mcpclient/internal/testtools"
	"github.com/mm-agent/mm/mcpclient/mcptest"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "hang", "sleep":
			// Neither reads its input nor answers: the process stays until
			// it is killed.
			time.Sleep(time.Hour)
			return
		case "hostile":
			// mcptest's hostile server, in the mode given next.
			if err := mcptest.Serve(os.Args[2], os.Stdin, os.Stdout); err != nil {
				fmt.Fprintln(os.Stderr, "testserver:", err)
			}
			return
		}
	}
	fmt.Fprintln(os.Stderr, "testserver: starting") // the client logs it
	if err := testtools.New().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
	}
}
