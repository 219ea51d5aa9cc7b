package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"strings"
)

//go:embed ask_agent.md
var askAgentDescription string

// askAgentArgs are ask_agent's parameters.
type askAgentArgs struct {
	Agent    string `json:"agent" jsonschema:"The agent to ask, by its configured name."`
	Question string `json:"question" alias:"prompt" jsonschema:"The question, with the context it needs."`
}

var askAgentSpec = specFor[askAgentArgs]("ask_agent")

// AgentAsker asks a configured agent a question and returns its answer.
type AgentAsker func(ctx context.Context, agent, question string) (string, error)

type askAgentTool struct{}

func (askAgentTool) Name() string            { return "ask_agent" }
func (askAgentTool) Description() string     { return askAgentDescription }
func (askAgentTool) Schema() json.RawMessage { return askAgentSpec.schemaCopy() }
func (askAgentTool) Kind() Kind              { return KindOther }

func (askAgentTool) spec() *spec { return askAgentSpec }

func (askAgentTool) prepare(_ Env, c *Call) error {
	a := argsOf[askAgentArgs](c)
	agent := strings.TrimSpace(a.Agent)
	c.Title = "ask_agent: " + agent
	switch {
	case agent == "":
		return errors.New(`ask_agent: argument "agent" is empty; give the agent's name`)
	case strings.TrimSpace(a.Question) == "":
		return errors.New(`ask_agent: argument "question" is empty`)
	}
	return nil
}

func (askAgentTool) run(ctx context.Context, env Env, c *Call) Result {
	if env.AskAgent == nil {
		return Result{Output: "ask_agent: no agent can be asked from here", Failed: true}
	}
	a := argsOf[askAgentArgs](c)
	answer, err := env.AskAgent(ctx, strings.TrimSpace(a.Agent), a.Question)
	switch {
	case ctx.Err() != nil:
		return Result{Output: withNewline(answer) + "[cancelled]", Failed: true}
	case err != nil:
		return Result{Output: withNewline(answer) + "[error: " + err.Error() + "]", Failed: true}
	}
	return Result{Output: env.Output.fit(answer, documentHead)}
}
