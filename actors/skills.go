package actors

import (
	"fmt"
	"os"
	"strings"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/history"
	"github.com/mm-agent/mm/tools/skills"
)

// Skills as commands (seed: "Les skills comme commandes"). A session reads
// the catalog of its skill folders (skills.dirs resolved against its cwd)
// when it starts, and again whenever a prompt may name a skill (it starts
// with / or holds a $), off the actor; the catalog is re-parsed only when
// a file changed. mm never loads a skill behind the model's back: `/name
// args` becomes `$name args`, and a `$name` tells the model to call
// read_skill.

// skillDirs are the absolute skill folders of a session in cwd.
func (rt *Runtime) skillDirs(cwd string) []string {
	home, _ := os.UserHomeDir()
	return skills.Dirs(rt.cfg.Skills.Dirs, cwd, home)
}

// Commands lists what session/prompt handles: the slash commands it
// intercepts, /ask when agents can be asked, then one per skill.
func Commands(set *skills.Set, ask bool) []acp.AvailableCommand {
	out := []acp.AvailableCommand{
		{Name: "new", Description: "Clear the history and start a new session"},
		{Name: "compact", Description: "Compress the history now, keeping the last turns"},
	}
	if ask {
		out = append(out, acp.AvailableCommand{Name: "ask", Description: "Ask another agent a question",
			Input: &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: "<agent> <question>"}}})
	}
	if set == nil {
		return out
	}
	for _, k := range set.Skills {
		if ask && k.Name == "ask" {
			continue // /ask is the command
		}
		out = append(out, acp.AvailableCommand{Name: k.Name, Description: k.Description,
			Input: &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: "parameters, if this skill needs any"}}})
	}
	return out
}

// mayNameSkill says whether text may name a skill, which the catalog must
// be read for.
func mayNameSkill(text string) bool {
	return strings.HasPrefix(strings.TrimSpace(text), "/") || strings.Contains(text, "$")
}

// withSkills rewrites `/name args` into `$name args` when name is a skill,
// and adds after the text, once per skill its $mentions name, the note
// that tells the model to read it. An unknown /name is left as it is.
func withSkills(text string, set *skills.Set) string {
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "/") {
		name, _ := skillToken(t[1:])
		if _, ok := set.Get(name); ok {
			text = "$" + t[1:]
		}
	}
	var notes strings.Builder
	seen := map[string]bool{}
	for i := 0; i < len(text); i++ {
		if text[i] != '$' || (i > 0 && !isSpace(text[i-1])) {
			continue
		}
		name, n := skillToken(text[i+1:])
		if _, ok := set.Get(name); ok && !seen[name] {
			seen[name] = true
			fmt.Fprintf(&notes, "\n[skill $%s: call read_skill with {\"name\": %q} and follow it]", name, name)
		}
		i += n
	}
	return text + notes.String()
}

// skillToken reads a skill name at the start of s: the characters a skill
// name may hold. It returns the name and its length.
func skillToken(s string) (string, int) {
	n := 0
	for n < len(s) {
		c := s[n]
		if c == '-' || c == '_' || c == '.' || isAlnumByte(c) {
			n++
			continue
		}
		break
	}
	return strings.TrimRight(s[:n], "."), n
}

func isAlnumByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// useSkills makes set the session's catalog: the system prompt names its
// skills (made again at the next safe point, system.go), and the client
// hears the new commands when it already had the old ones.
func (s *session) useSkills(set *skills.Set) {
	if set == nil || s.skills.Same(set) {
		return
	}
	s.skills = set
	s.useTools()
	s.sys.dirty = true // the system message lists them
	if s.announced {
		s.announced = false
		s.announce()
	}
}

// setPlan keeps the plan a plan call made and shows it whole.
func (s *session) setPlan(p []history.PlanEntry) {
	s.plan = p
	s.out.Update(s.id, history.PlanUpdate(p, nil))
}

// askCommand rewrites `/ask <agent> <question>` into the request that
// makes the model call ask_agent; any other text is returned as it is.
func askCommand(text string) string {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "/ask ") {
		return text
	}
	agent, question, _ := strings.Cut(strings.TrimSpace(t[len("/ask "):]), " ")
	if question = strings.TrimSpace(question); agent == "" || question == "" {
		return text
	}
	return fmt.Sprintf("Ask the agent %q this question with ask_agent, then tell me its answer:\n\n%s", agent, question)
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }
