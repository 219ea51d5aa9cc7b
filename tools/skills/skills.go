package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Reserved are the names of mm's own commands, which no skill may take.
var Reserved = []string{"new", "compact"}

// skillFile is the name of the file that makes a folder a skill.
const skillFile = "SKILL.md"

// maxFiles bounds the list returned by Skill.Files, because the list goes
// into the model's context and a skill folder may hold far more files than
// are worth showing.
const maxFiles = 200

// Skill is one loaded skill.
type Skill struct {
	Name        string
	Description string
	Dir         string // the skill's folder, absolute
	Path        string // its SKILL.md, absolute
}

// Set is a catalog: the skills of a list of directories, and what was wrong with them.
// A Set is immutable.
type Set struct {
	Skills   []Skill  // sorted by name
	Warnings []string // one line each, fit for a log or a banner
}

// Dirs resolves configured skill dirs: "~" and "~/…" against home, a relative dir against cwd.
// An entry that cannot be made absolute (a "~" entry without a home, a
// relative one without a cwd, or an empty one) is dropped, because Load
// must not read a directory relative to the process's own working
// directory, which belongs to no session. "~user" forms are not expanded:
// they are taken as relative paths, as a shell would not see them either
// once quoted in a config file.
func Dirs(configured []string, cwd, home string) []string {
	var out []string
	for _, d := range configured {
		d = strings.TrimSpace(d)
		switch {
		case d == "":
			continue
		case d == "~":
			d = home
		case strings.HasPrefix(d, "~/") || (filepath.Separator != '/' && strings.HasPrefix(d, "~"+string(filepath.Separator))):
			if home == "" {
				continue
			}
			d = filepath.Join(home, d[2:])
		case !filepath.IsAbs(d):
			if cwd == "" {
				continue
			}
			d = filepath.Join(cwd, d)
		}
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		out = append(out, filepath.Clean(d))
	}
	return out
}

// Get returns the named skill.
func (s *Set) Get(name string) (Skill, bool) {
	if s == nil {
		return Skill{}, false
	}
	i, ok := sort.Find(len(s.Skills), func(i int) int { return strings.Compare(name, s.Skills[i].Name) })
	if !ok {
		return Skill{}, false
	}
	return s.Skills[i], true
}

// Names lists the skill names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.Skills))
	for i, k := range s.Skills {
		names[i] = k.Name
	}
	return names
}

// Same says whether two sets hold the same skills (names, descriptions, paths): whether a session must re-announce its commands.
// Warnings are not compared, because they change nothing the editor shows
// as commands. A nil Set is the same as an empty one.
func (s *Set) Same(o *Set) bool {
	if s == o {
		return true
	}
	var a, b []Skill
	if s != nil {
		a = s.Skills
	}
	if o != nil {
		b = o.Skills
	}
	return slices.Equal(a, b)
}

// equal says whether two sets are identical, warnings included; Load uses
// it to hand out the previous *Set when a re-read found nothing new.
func (s *Set) equal(o *Set) bool {
	return slices.Equal(s.Skills, o.Skills) && slices.Equal(s.Warnings, o.Warnings)
}

// Body reads the skill's SKILL.md now and returns its body (after the front matter), trimmed of leading blank lines.
// It reads the file again rather than keeping the body in the cache, so
// that the procedure the model follows is always the one on disk, and so
// that catalogs cost memory only for names and descriptions. Line endings
// are normalised to "\n".
func (k Skill) Body() (string, error) {
	data, err := os.ReadFile(k.Path)
	if err != nil {
		return "", err
	}
	_, body, err := splitFrontMatter(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", k.Path, err)
	}
	text := strings.ReplaceAll(string(body), "\r\n", "\n")
	for text != "" {
		line, rest, found := strings.Cut(text, "\n")
		if strings.TrimSpace(line) != "" {
			break
		}
		if !found {
			return "", nil
		}
		text = rest
	}
	return text, nil
}

// Files lists the other files of the skill's folder, absolute paths, sorted, SKILL.md excluded, subfolders walked, at most 200 (then a last entry says how many more there are, e.g. "… and 37 more files").
// Directories are not listed, only what they contain; symbolic links are
// listed but not followed, so a link to a large tree cannot flood the list.
// A .git folder is skipped: it is version-control metadata, never part of
// the skill, and its many objects would sort first and push the skill's
// real files past the cap. A subfolder that cannot be read is skipped; only
// an unreadable skill folder is an error.
func (k Skill) Files() ([]string, error) {
	own := filepath.Join(k.Dir, skillFile)
	var files []string
	err := filepath.WalkDir(k.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == k.Dir {
				return err
			}
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if path != k.Dir && d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if path != own {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// WalkDir's order is depth-first, which differs from the sorted order of
	// full paths ("a-b" sorts before "a/c"), so sort explicitly.
	sort.Strings(files)
	if n := len(files) - maxFiles; n > 0 {
		files = files[:maxFiles:maxFiles]
		if n == 1 {
			files = append(files, "… and 1 more file")
		} else {
			files = append(files, fmt.Sprintf("… and %d more files", n))
		}
	}
	return files, nil
}

// validName says whether name can be typed as /name and $name: ASCII
// letters, digits, "-", "_" and "." only. Non-ASCII letters are refused
// because editors and terminals disagree on how they split and normalise
// them, which would make such a skill hard to invoke reliably.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// reserved says whether name is one of mm's own commands.
func reserved(name string) bool {
	return slices.Contains(Reserved, name)
}

// errNoFrontMatter and errUnclosed describe the two ways a file can lack
// well-formed front matter delimiters.
var (
	errNoFrontMatter = errors.New(`no front matter: the file must start with a "---" line`)
	errUnclosed      = errors.New(`front matter is not closed by a "---" line`)
)
