// Command libfloor is the second floor of mm's start-up benchmarks: the
// floor (testdata/floor) with the three libraries mm must use linked in —
// protoactor-go, acp-go-sdk and langchaingo's OpenAI client — and their
// package initialisers run, answering through the SDK's own connection.
// What mm takes beyond it is what mm links and does besides.
package main

import (
	"context"
	"os"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/acp-go-sdk"
	"github.com/tmc/langchaingo/llms/openai"
)

type agent struct{ acp.Agent }

func (agent) Initialize(context.Context, acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersionNumber}, nil
}

// Linked, not run: what start-up pays for them is their initialisers.
var _ = []any{actor.NewActorSystem, openai.New}

func main() {
	conn := acp.NewAgentSideConnection(agent{}, os.Stdout, os.Stdin)
	<-conn.Done()
}
