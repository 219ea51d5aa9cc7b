package skills

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// bom is the UTF-8 byte order mark that some Windows editors put at the
// start of a file; it is not part of the front matter's first line.
var bom = []byte("\xEF\xBB\xBF")

// splitFrontMatter splits a SKILL.md into its front matter (without the
// "---" lines) and its body. The first line must be "---", and the front
// matter ends at the next line that is "---"; both may end in "\r" or
// trailing blanks, which editors add without the author noticing.
func splitFrontMatter(data []byte) (front, body []byte, err error) {
	data = bytes.TrimPrefix(data, bom)
	line, rest, _ := bytes.Cut(data, []byte("\n"))
	if !isDelimiter(line) {
		return nil, nil, errNoFrontMatter
	}
	start := len(data) - len(rest)
	for pos := start; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
			end = pos + end
		} else {
			end = len(data)
		}
		if isDelimiter(data[pos:end]) {
			return data[start:pos], data[next:], nil
		}
		pos = next
	}
	return nil, nil, errUnclosed
}

// isDelimiter says whether line is a front matter delimiter, "---".
func isDelimiter(line []byte) bool {
	return string(bytes.TrimRight(line, " \t\r")) == "---"
}

// frontMatter holds the keys of a SKILL.md's front matter that mm reads;
// other keys are ignored, so that files written for other agents load too.
type frontMatter struct {
	Name        yamlString `yaml:"name"`
	Description yamlString `yaml:"description"`
}

// yamlString is a string that must be written as a YAML string. yaml.v3
// would otherwise turn "name: 123" or "description: true" into text
// silently, which hides a mistake the author should hear about.
type yamlString string

// UnmarshalYAML accepts a string scalar only. A null value never reaches
// it (yaml.v3 leaves the field empty), so "name:" reads as a missing name.
func (s *yamlString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		what := n.ShortTag()
		switch n.Kind {
		case yaml.MappingNode:
			what = "a mapping"
		case yaml.SequenceNode:
			what = "a list"
		}
		return fmt.Errorf("line %d: must be a string, not %s", n.Line, strings.TrimPrefix(what, "!!"))
	}
	*s = yamlString(n.Value)
	return nil
}

// parseSkill reads the name and description of a SKILL.md's content and
// checks them. The returned error is one line, worded for the skill's
// author.
func parseSkill(data []byte) (name, description string, err error) {
	front, _, err := splitFrontMatter(data)
	if err != nil {
		return "", "", err
	}
	// Decoding through a Node lets a front matter that is not a mapping be
	// reported plainly, rather than with yaml.v3's message naming Go types.
	var doc yaml.Node
	if err := yaml.Unmarshal(front, &doc); err != nil {
		return "", "", fmt.Errorf("invalid YAML front matter: %s", oneLine(err))
	}
	var fm frontMatter
	if len(doc.Content) > 0 {
		if n := doc.Content[0]; n.Kind != yaml.MappingNode {
			return "", "", fmt.Errorf("invalid YAML front matter: line %d: expected keys such as \"name:\" and \"description:\"", n.Line+1)
		}
		if err := doc.Content[0].Decode(&fm); err != nil {
			return "", "", fmt.Errorf("invalid YAML front matter: %s", oneLine(err))
		}
	}
	name = strings.TrimSpace(string(fm.Name))
	description = strings.TrimSpace(string(fm.Description))
	switch {
	case name == "":
		return "", "", errors.New(`front matter has no "name"`)
	case description == "":
		return "", "", errors.New(`front matter has no "description"`)
	case !validName(name):
		return "", "", fmt.Errorf(`invalid name %q: use only letters, digits, "-", "_" and "."`, name)
	}
	return name, description, nil
}

// lineRef finds the line numbers in yaml.v3's errors.
var lineRef = regexp.MustCompile(`\bline (\d+)\b`)

// oneLine flattens a yaml.v3 error, which may span several lines, into one
// line fit for a warning. yaml.v3 counts lines from the start of the front
// matter, so each line number is moved down by one to count the opening
// "---" too: the author then finds the line where their editor shows it.
func oneLine(err error) string {
	fields := strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	s := strings.Join(fields, " ")
	s = strings.TrimPrefix(s, "yaml: ")
	return lineRef.ReplaceAllStringFunc(s, func(m string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+1)
	})
}
