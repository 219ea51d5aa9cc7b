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

// readSkillArgs are read_skill's parameters.
type readSkillArgs struct {
	Name string `json:"name" alias:"skill" jsonschema:"The skill's name, without the $."`
}

var readSkillSpec = specFor[readSkillArgs]("read_skill")

type readSkillTool struct{}

func (readSkillTool) Name() string            { return "read_skill" }
func (readSkillTool) Description() string     { return readSkillDescription }
func (readSkillTool) Schema() json.RawMessage { return readSkillSpec.schemaCopy() }
func (readSkillTool) Kind() Kind              { return KindRead }

func (readSkillTool) spec() *spec { return readSkillSpec }

// prepare finds the skill in the session's catalog, read afresh (a skill
// added since the session started is found).
func (readSkillTool) prepare(env Env, c *Call) error {
	name := strings.TrimPrefix(strings.TrimSpace(argsOf[readSkillArgs](c).Name), "$")
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

func (readSkillTool) run(_ context.Context, env Env, c *Call) Result {
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
	return Result{Output: env.Output.fit(b.String(), documentHead)}
}
