package tools

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mm-agent/mm/tools/skills"
)

//go:embed read_skill.md
var readSkillDescription string

const readSkillSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The skill's name, without the $."}
  },
  "required": ["name"],
  "additionalProperties": false
}`

type readSkillTool struct{}

func (readSkillTool) Name() string            { return "read_skill" }
func (readSkillTool) Description() string     { return readSkillDescription }
func (readSkillTool) Schema() json.RawMessage { return json.RawMessage(readSkillSchema) }
func (readSkillTool) Kind() Kind              { return KindRead }

func (readSkillTool) params() []param {
	return []param{{name: "name", typ: argString, required: true}}
}

// prepare finds the skill in the session's catalog, read afresh (a skill
// added since the session started is found).
func (readSkillTool) prepare(env Env, c *Call) error {
	name := strings.TrimPrefix(strings.TrimSpace(strArg(c.Args, "name")), "$")
	c.Title = "read_skill: " + name
	if name == "" {
		return fmt.Errorf(`read_skill: argument "name" is empty; give the skill's name`)
	}
	set := skills.Load(env.SkillDirs)
	k, ok := set.Get(name)
	if !ok {
		if names := set.Names(); len(names) > 0 {
			return fmt.Errorf("read_skill: there is no skill %q; the skills are: %s", name, strings.Join(names, ", "))
		}
		return fmt.Errorf("read_skill: there is no skill %q; this session has no skills", name)
	}
	c.Locations = []string{k.Path}
	c.skill = &k
	return nil
}

func (readSkillTool) run(_ context.Context, _ Env, c *Call) Result {
	body, err := c.skill.Body()
	if err != nil {
		return Result{Output: fmt.Sprintf("read_skill: cannot read %s: %v", c.skill.Path, err), Failed: true}
	}
	var b strings.Builder
	b.WriteString(strings.TrimRight(body, "\n"))
	b.WriteString("\n")
	files, err := c.skill.Files()
	switch {
	case err != nil:
		fmt.Fprintf(&b, "\n[the skill's other files could not be listed: %v]\n", err)
	case len(files) > 0:
		fmt.Fprintf(&b, "\nFiles of this skill (in %s):\n", c.skill.Dir)
		for _, f := range files {
			b.WriteString("- " + f + "\n")
		}
	}
	return Result{Output: truncateHead(b.String(), MaxOutputBytes)}
}
