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

const askAgentSchema = `{
  "type": "object",
  "properties": {
    "agent": {"type": "string", "description": "The agent to ask, by its configured name."},
    "question": {"type": "string", "description": "The question, with the context it needs."}
  },
  "required": ["agent", "question"],
  "additionalProperties": false
}`

// AgentAsker asks a configured agent a question and returns its answer.
type AgentAsker func(ctx context.Context, agent, question string) (string, error)

type askAgentTool struct{}

func (askAgentTool) Name() string            { return "ask_agent" }
func (askAgentTool) Description() string     { return askAgentDescription }
func (askAgentTool) Schema() json.RawMessage { return json.RawMessage(askAgentSchema) }
func (askAgentTool) Kind() Kind              { return KindOther }

func (askAgentTool) params() []param {
	return []param{
		{name: "agent", typ: argString, required: true},
		{name: "question", typ: argString, required: true},
	}
}

func (askAgentTool) prepare(_ Env, c *Call) error {
	agent := strings.TrimSpace(strArg(c.Args, "agent"))
	c.Title = "ask_agent: " + agent
	switch {
	case agent == "":
		return errors.New(`ask_agent: argument "agent" is empty; give the agent's name`)
	case strings.TrimSpace(strArg(c.Args, "question")) == "":
		return errors.New(`ask_agent: argument "question" is empty`)
	}
	return nil
}

func (askAgentTool) run(ctx context.Context, env Env, c *Call) Result {
	if env.AskAgent == nil {
		return Result{Output: "ask_agent: no agent can be asked from here", Failed: true}
	}
	answer, err := env.AskAgent(ctx, strings.TrimSpace(strArg(c.Args, "agent")), strArg(c.Args, "question"))
	switch {
	case ctx.Err() != nil:
		return Result{Output: withNewline(answer) + "[cancelled]", Failed: true}
	case err != nil:
		return Result{Output: withNewline(answer) + "[error: " + err.Error() + "]", Failed: true}
	}
	return Result{Output: answer}
}
