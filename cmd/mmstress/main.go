// Command mmstress is mm's multi-session stress harness: it opens many
// sessions against one runtime (in this process, `mm -acp` subprocesses
// over real pipes, an `mm serve` over WebSocket connections, or several
// `mm serve` as one cluster, one of which may be killed mid-run), runs
// turns with a chosen mix, checks every update, and reports throughput,
// latencies and memory. See docs/stress.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"github.com/mm-agent/mm/stress"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	c := stress.Defaults()
	fs := flag.NewFlagSet("mmstress", flag.ContinueOnError)
	fs.IntVar(&c.Sessions, "sessions", c.Sessions, "sessions to open")
	fs.IntVar(&c.Turns, "turns", c.Turns, "turns per session (0: measure idle sessions)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "turns.concurrency of the runtime")
	fs.IntVar(&c.Procs, "procs", 0, "0: mm in this process; N: N `mm -acp` subprocesses over real pipes")
	fs.StringVar(&c.MM, "mm", defaultMM(), "the mm binary, for -procs")
	fs.StringVar(&c.URL, "url", "", "drive a running `mm serve` at this WebSocket URL (ws://HOST:PORT/acp), or the nodes of one cluster at these URLs, separated by commas (the connections round-robin over them)")
	fs.StringVar(&c.Token, "token", "", "the served mm's token, for -url (default $MM_SERVE_TOKEN)")
	fs.StringVar(&c.Serve, "serve", "", "start this mm binary as `mm serve -listen 127.0.0.1:0` for the run and drive it over WebSocket")
	fs.IntVar(&c.Conns, "conns", c.Conns, "WebSocket connections the sessions are spread over (-url, -serve), round-robin over the nodes; at least one per node that takes connections")
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "with -serve: start this many mm serve as one cluster on loopback (1: a single mm serve, no cluster)")
	fs.StringVar(&c.Placement, "placement", "", "cluster.placement of the run's cluster (-nodes): balanced (mm's default: on the node its connection reaches while that node holds no more than its share), local (on the node its connection reaches) or spread (over the nodes, by id; the default with -kill-node)")
	fs.DurationVar(&c.FailureTimeout, "failure-timeout", c.FailureTimeout, "cluster.failureTimeout of the run's cluster (-nodes)")
	fs.DurationVar(&c.KillNode, "kill-node", 0, "this long into the turns, kill -9 the run's last node, which hosts grains but no connection, and count the prompts answered, failed with the node and lost (needs -nodes 2 or more and -persist)")
	fs.StringVar(&c.Dir, "dir", "", "folder the run's own folder (config, sessions' cwds) is made in; with -url, inside the server's serve.roots (default: the temp dir)")
	writeConfig := fs.String("write-config", "", "write the config and script a served mm needs for these flags into this folder (its serve.roots), then exit")
	fs.DurationVar(&c.Latency, "latency", 0, "scripted model: time to first token")
	fs.Float64Var(&c.TokensPerS, "tps", 0, "scripted model: tokens per second (0: instant)")
	fs.IntVar(&c.Words, "words", c.Words, "words in each answer (each streamed as its own chunk)")
	fs.Float64Var(&c.Bash, "bash", 0, "share of turns that run a bash command")
	fs.Float64Var(&c.Edit, "edit", 0, "share of turns that write a file")
	fs.Float64Var(&c.Ask, "ask", 0, "share of turns that ask permission (the harness allows)")
	fs.Float64Var(&c.Cancel, "cancel", 0, "share of turns cancelled while bash runs `sleep 30`")
	fs.DurationVar(&c.CancelAfter, "cancel-delay", c.CancelAfter, "time between the command starting and the cancel")
	fs.Float64Var(&c.Fail, "fail", 0, "share of turns the model server fails")
	fs.BoolVar(&c.Persist, "persist", false, "persist sessions (sessions.enabled)")
	fs.StringVar(&c.Store, "store", "", "with -persist: keep the sessions in this Postgres database (store.url, postgres://…) instead of files")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the turn mix")
	asJSON := fs.Bool("json", false, "print the machine report (JSON) on stdout")
	baseline := fs.Bool("baseline", false, "also run the plain JSON-RPC echo baseline over pipes (for -procs runs) and report the ratio")
	echoServer := fs.String("echo-server", "", "serve the echo baseline on stdin/stdout: sdk or raw (used by -baseline)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile (pprof) of the run to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.Token == "" {
		c.Token = os.Getenv("MM_SERVE_TOKEN")
	}
	if *writeConfig != "" {
		path, err := stress.WriteServeConfig(c, *writeConfig)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mmstress:", err)
			return 1
		}
		fmt.Printf("MM_SERVE_TOKEN=… mm serve -config %s\nmmstress -url ws://HOST:PORT/acp -dir %s …\n", path, *writeConfig)
		return 0
	}
	if *echoServer != "" {
		serve := stress.ServeEchoSDK
		if *echoServer == "raw" {
			serve = stress.ServeEcho
		}
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mmstress:", err)
			return 1
		}
		return 0
	}
	c.Progress = !*quiet
	if os.Getenv("GOGC") == "" {
		// The harness allocates in bursts and its runs are short: a larger
		// heap target buys CPU for the agents (in-process, they share it).
		debug.SetGCPercent(400)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mmstress:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "mmstress:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := stress.Run(ctx, c)
	if *memProfile != "" {
		if f, err := os.Create(*memProfile); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmstress:", err)
		return 1
	}
	if *baseline {
		self, err := os.Executable()
		if err == nil {
			r.Baseline, err = stress.RunEcho(ctx, self, "sdk", c.Sessions, max(c.Turns, 1))
		}
		if err == nil {
			r.RawEcho, err = stress.RunEcho(ctx, self, "raw", c.Sessions, max(c.Turns, 1))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mmstress: baseline:", err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	} else {
		r.Human(os.Stdout)
	}
	if !r.OK() {
		if *asJSON {
			r.Human(os.Stderr)
		}
		return 3
	}
	return 0
}

// defaultMM is the mm next to this binary, else mm on the PATH.
func defaultMM() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "mm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "mm"
}
