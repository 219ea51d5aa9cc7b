package prompt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mm-agent/mm/configs"
)

// Parts are what a session's system message is made of, in its order:
// what changes least comes first, so that the servers' prompt caches keep
// the longest prefix.
type Parts struct {
	// Compact selects mm's compact prompt (a small window, Compact).
	Compact bool
	// Own is the text of the user's prompt file (prompt.systemFile), ""
	// for none; Replace puts it in the place of mm's prompt instead of
	// after it.
	Own     string
	Replace bool
	// Skills are the skills the model may read (read_skill).
	Skills []Skill
	// Instructions are the project's instruction files (Finder.Discover).
	Instructions []File
	// Env is the environment gathered when the session opened (none
	// while its Date is zero); Policy what its settings let commands and
	// edits do now.
	Env    Env
	Policy Policy
}

// Skill is a skill as the system message lists it.
type Skill struct{ Name, Description string }

// Compact says whether a model whose context window is window tokens gets
// mm's compact prompt: a window known (not 0) and below below (0: never).
func Compact(window, below int) bool {
	return window > 0 && below > 0 && window < below
}

// InstructionBytes is the budget of project instructions for a window:
// max, and no more than half the window's tokens in bytes (about an
// eighth of the window) when the window is known.
func InstructionBytes(max, window int) int {
	if window > 0 {
		return min(max, window/2)
	}
	return max
}

// maxOwnBytes bounds the user's prompt file: it goes into every request.
const maxOwnBytes = 64 << 10

// ReadOwn reads the user's prompt file, at most 64 KiB of it (a longer
// one is cut with a note).
func ReadOwn(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	text, cut := readBounded(path, maxOwnBytes)
	if cut > 0 {
		text += fmt.Sprintf("\n[… %d more bytes of %s left out: a prompt file is read up to 64 KiB]\n", cut, path)
	}
	return text, nil
}

// System assembles the system message. It is made in one allocation of
// its exact size: what follows mm's prompt (the user's, the skills, the
// instructions, the environment) is written first on its own, so that a
// session's system message takes a size class of its own rather than the
// next power of two (an 8 KiB object is a span of its own, which a
// process opening sessions by the thousand pays for in page faults).
func System(p Parts) string {
	base := configs.SystemPrompt(p.Compact)
	own := strings.ReplaceAll(strings.TrimSpace(p.Own), "{{cwd}}", p.Env.Cwd)
	var t strings.Builder
	// Room for the tail's large parts at once, and a little more than
	// the environment block, the skills and the headings need.
	size := len(own) + 1536
	for i := range p.Instructions {
		size += len(p.Instructions[i].Text) + 128
	}
	t.Grow(size)
	head := base
	switch {
	case own != "" && p.Replace:
		head = own
		t.WriteString("\n")
	case own != "":
		t.WriteString("\n# The user's own instructions\n" + own + "\n")
	}
	if len(p.Skills) > 0 {
		t.WriteString("\n# Skills\nSkills are procedures written for this project or this user. When a message names one as $name, call read_skill with that name first and follow what it says; use one yourself when it fits the task. The skills:\n")
		for _, k := range p.Skills {
			fmt.Fprintf(&t, "- %s: %s\n", k.Name, k.Description)
		}
	}
	if len(p.Instructions) > 0 {
		t.WriteString("\n# Project instructions\nThe files below hold instructions from the people who work on this project; follow them. A file applies to its folder and everything below it. Where two disagree, the deeper file wins for the files under it, and what the user says in this conversation wins over every file. A subfolder's file is shown to you after a tool's result the first time you work on a file there.\n")
		for i := range p.Instructions {
			f := &p.Instructions[i]
			if f.Global {
				fmt.Fprintf(&t, "\n## %s (the user's own, for every project)\n", f.Path)
			} else {
				fmt.Fprintf(&t, "\n## %s (for %s)\n", f.Path, f.Dir+string(filepath.Separator))
			}
			t.WriteString(f.body() + "\n")
		}
	}
	if !p.Env.Date.IsZero() {
		t.WriteString("\n")
		p.Env.render(&t, p.Policy)
	}
	var b strings.Builder
	b.Grow(len(head) + t.Len())
	b.WriteString(head)
	b.WriteString(t.String())
	return b.String()
}
