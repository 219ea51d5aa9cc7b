package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/agents"
	"github.com/mm-agent/mm/configs"
	"github.com/mm-agent/mm/hooks"
	"github.com/mm-agent/mm/jsonrpc"
)

// ask is `mm --ask AGENT_CMD "question"`: mm as an ACP client of the agent
// that the shell command line AGENT_CMD starts, in the current directory.
// It prints the answer on stdout. It cannot ask its user anything: the
// agent's forms are refused with an error, as the seed says, and its
// permission requests are refused unless allow is set.
func ask(agentCmd, question string, allow bool, cfg *configs.Config, stdout io.Writer, log *slog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cwd, err := os.Getwd()
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	sessionID := "ask-" + hex.EncodeToString(b[:])
	// bash -c with exec: the command line is the user's, quotes and all,
	// and the agent is bash's own process, in the group mm kills.
	a, err := agents.Start(ctx, agents.Config{Name: "agent", Command: "bash", Args: []string{"-c", "exec " + agentCmd}}, cwd, sessionID, log)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	defer a.Close()
	answer, err := a.Ask(ctx, question, cliRelay{allow: allow, log: log})
	if err != nil {
		log.Error(err.Error())
		fmt.Fprint(stdout, answer)
		return 1
	}
	r := &hooks.Runner{PreToolCallLines: cfg.Hooks.PreToolCall, PostAskLines: cfg.Hooks.PostAsk, Timeout: cfg.Hooks.Timeout, Log: log}
	answer = r.PostAsk(ctx, hooks.PostAskEvent{SessionID: sessionID, Cwd: cwd, Agent: agentCmd, Question: question, Answer: answer})
	fmt.Fprintln(stdout, strings.TrimRight(answer, "\n"))
	return 0
}

// cliRelay answers the asked agent's requests for `mm --ask`, where no one
// can be asked.
type cliRelay struct {
	allow bool
	log   *slog.Logger
}

func (c cliRelay) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	want := []acp.PermissionOptionKind{acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways}
	verdict := "refused"
	if c.allow {
		want = []acp.PermissionOptionKind{acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways}
		verdict = "allowed"
	}
	title := ""
	if p.ToolCall.Title != nil {
		title = *p.ToolCall.Title
	}
	for _, kind := range want {
		for _, o := range p.Options {
			if o.Kind == kind {
				c.log.Info(fmt.Sprintf("mm --ask: %s %q (%s)", verdict, title, o.OptionId))
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
			}
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

func (cliRelay) Elicit(context.Context, acp.UnstableCreateElicitationRequest) (acp.UnstableCreateElicitationResponse, error) {
	return acp.UnstableCreateElicitationResponse{}, jsonrpc.Internal("mm --ask cannot ask anyone: there is no user to show a form to", nil)
}
