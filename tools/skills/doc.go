// Package skills owns mm's skill catalogs. A skill is a folder holding a
// SKILL.md file: YAML front matter with a name and a description, then a
// Markdown body, the procedure the model follows when the user invokes the
// skill as /name or $name. The folder may hold other files (scripts,
// templates) that the procedure refers to.
//
// The package reads the skills of an ordered list of directories into a Set
// (Load), resolves the configured directories of a session (Dirs), and gives
// a skill's body and files on demand (Skill.Body, Skill.Files). It decides
// which skills make up a catalog: a broken SKILL.md is skipped, a skill named
// like one of mm's own commands (Reserved) is left out because it could never
// be reached, and a skill in a later directory overrides one of the same name
// in an earlier directory, so that a project's skills win over the user's.
// Every such decision leaves a one-line warning in the Set, because a skill
// that silently fails to appear is hard to debug.
//
// Catalogs are read per session, since each session has its own working
// directory and so its own list of directories, and sessions ask for them
// often. Load therefore keeps a process-wide cache keyed by directory and
// validates it with stat calls only: the directory's mtime tells whether
// skill folders were added or removed, and each SKILL.md's mtime and size
// tell whether it was edited. Only what changed is read and parsed again.
// A file or directory whose mtime is within a couple of seconds of the
// moment it was read is checked again on the next Load, because a second
// change within the same timestamp tick would otherwise go unseen. When
// nothing changed, Load returns the very same *Set as before, so callers may
// compare pointers before calling Set.Same.
//
// Load is safe for concurrent use by any number of goroutines. A Set is
// immutable once returned and is shared between callers: they must not
// modify its slices.
package skills
