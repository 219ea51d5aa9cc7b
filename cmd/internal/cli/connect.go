package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/connect"
)

// runConnect is `mm connect [-config FILE] URL`.
func runConnect(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mm connect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config `FILE`, read for acp.maxLineBytes (default $MM_CONFIG, then ~/.config/mm/config.yaml)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mm connect [-config FILE] URL\n\n"+
			"Bridges stdin/stdout to the mm served at URL (wss://HOST:PORT/acp; ws://, https:// and http:// too),\n"+
			"with the token in $MM_TOKEN.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		if fs.NArg() > 1 {
			fmt.Fprintf(stderr, "mm connect: unexpected argument %q\n", fs.Arg(1))
		}
		fs.Usage()
		return 2
	}
	target, err := connect.URL(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "mm connect: %v\n", err)
		return 2
	}
	cfg, err := configs.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "mm connect: %v\n", err)
		return 1
	}
	token := os.Getenv("MM_TOKEN")

	// An editor gone mid-write is an error to report, not a death.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = connect.Run(ctx, connect.Options{URL: target, Token: token, MaxLine: int(cfg.ACP.MaxLineBytes),
		Stdin: stdin, Stdout: stdout, Stderr: stderr, ResumeFor: cfg.Serve.ResumeTimeout})
	if err != nil {
		fmt.Fprintf(stderr, "mm connect: %v\n", err)
		return 1
	}
	return 0
}
