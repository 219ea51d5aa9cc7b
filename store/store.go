package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/mm-agent/mm/history"
)

// Version is the format version Marshal writes. Load accepts every version
// from 1 up to this one and refuses a newer one, because a newer file may
// mean something this build would silently misread.
const Version = 1

// Errors that Load and Unmarshal wrap. Test them with errors.Is.
var (
	// ErrNotFound means there is no session file at the path. Load's error
	// also wraps fs.ErrNotExist.
	ErrNotFound = errors.New("session file not found")
	// ErrCorrupt means the file is not a valid session file: truncated,
	// not JSON, or missing what every session file must have.
	ErrCorrupt = errors.New("corrupt session file")
	// ErrVersion means the file was written by a newer mm, with a format
	// version greater than Version.
	ErrVersion = errors.New("unsupported session file version")
)

// Provenance says where a session comes from (the mm.sessionProvenance
// _meta of the ACP surface).
type Provenance struct {
	SessionID        string `json:"sessionId"`
	ParentSessionID  string `json:"parentSessionId,omitempty"`
	Kind             string `json:"kind"` // "root" | "fork" | "continuation"
	CompressionDepth int    `json:"compressionDepth"`
}

// Usage holds a session's token totals. Reported is false while the server
// has never reported a count, so that a total of zero is not mistaken for a
// real one; ThoughtReported and CachedReadReported say the same of the two
// optional counts.
type Usage struct {
	Reported           bool `json:"reported"`
	Input              int  `json:"input"`
	Output             int  `json:"output"`
	Thought            int  `json:"thought"`
	CachedRead         int  `json:"cachedRead"`
	ThoughtReported    bool `json:"thoughtReported"`
	CachedReadReported bool `json:"cachedReadReported"`
}

// File is one session file. The header fields come before History on
// purpose: encoding/json writes fields in declaration order, and List relies
// on finding id, cwd, title and updated before the (possibly huge) history so
// that it can stop reading there.
type File struct {
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Cwd     string    `json:"cwd"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Title   string    `json:"title,omitempty"` // history.Title(History) unless set
	// Owner names the token of `mm serve` whose session this is; "" for a
	// session of mm -acp (its user's).
	Owner      string            `json:"owner,omitempty"`
	Provenance Provenance        `json:"provenance"`
	Mode       string            `json:"mode,omitempty"`  // "ask" | "yolo" ("" = config default)
	Model      string            `json:"model,omitempty"` // selected model id ("" = default)
	Usage      Usage             `json:"usage"`
	History    []history.Message `json:"history"`
	// Plan is the session's plan (the plan tool), empty when it has none.
	Plan []history.PlanEntry `json:"plan,omitempty"`

	// Signed is set by Reader.Load when the file carries this user's
	// signature (Key): this user's mm wrote it as it is. It is never
	// written; Key.Marshal signs what it writes.
	Signed bool `json:"-"`
	// Rev is the revision of the stored session that Load read, which the
	// session's Writer fences its saves on (Backend.Writer): in Postgres
	// the row's version, counted up by every save; 0 for a file. It is
	// never written into the document.
	Rev int64 `json:"-"`
}

// Path returns the session file of id: <cwd>/<dir>/<id>.json when dir is
// relative, <dir>/<id>.json when it is absolute. With an empty id it returns
// the sessions directory itself, which is what List reads.
//
// Path does not vet id: an id that comes from a client must pass CheckID
// first, or "../x" would name a file outside the sessions directory.
func Path(cwd, dir, id string) string {
	base := dir
	if !filepath.IsAbs(dir) {
		base = filepath.Join(cwd, dir)
	}
	if id == "" {
		return filepath.Clean(base)
	}
	return filepath.Join(base, id+".json")
}

// CheckID reports whether id can name a session file: not empty, at most 200
// bytes, no path separator, no NUL, and not starting with a dot (dot names
// are reserved for temporary files, which List ignores). Session ids that
// mm makes (20260916-101530-4f2a9c1e) always pass.
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("empty session id")
	case len(id) > 200:
		return errors.New("session id longer than 200 bytes")
	case id[0] == '.':
		return fmt.Errorf("session id %q starts with a dot", id)
	case strings.ContainsAny(id, "/\\\x00"):
		return fmt.Errorf("session id %q is not a plain file name", id)
	}
	return nil
}

// Marshal encodes f as compact JSON, without indentation because files are
// rewritten after every turn and size is time. It writes Version whatever
// f.Version holds, fills an empty Title with history.Title(f.History), and writes
// a nil History as []; f itself is not modified. HTML characters are not
// escaped, because histories are full of code where <, > and & are common
// and \u003c would only make the file larger and harder to read.
//
// The file is not signed: Key.Marshal writes the files mm loads again.
func Marshal(f *File) ([]byte, error) { return marshal(f, 0) }

// marshal is Marshal with room for extra more bytes in the returned
// slice's capacity, for a signature to be appended without a copy.
func marshal(f *File, extra int) ([]byte, error) {
	c := *f
	c.Version = Version
	if c.Title == "" {
		c.Title = history.Title(c.History)
	}
	if c.History == nil {
		c.History = []history.Message{}
	}
	var buf bytes.Buffer
	buf.Grow(sizeHint(&c) + extra)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("encode session %s: %w", f.ID, err)
	}
	// Encode ends with a newline that the format does not need.
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// sizeHint guesses the encoded size of f so that Marshal's buffer grows once
// instead of doubling its way up through a large history.
func sizeHint(f *File) int {
	n := 512 + len(f.Cwd) + len(f.Title)
	for i := range f.History {
		m := &f.History[i]
		n += 64 + len(m.Content) + len(m.ToolCallID) + len(m.Name) + len(m.CallRef) + len(m.Title)
		for _, tc := range m.ToolCalls {
			n += 48 + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
		}
		if m.RawInput != nil {
			n += 128
		}
	}
	// Escapes (quotes, newlines in code) make the text a little longer.
	return n + n/8
}

// Unmarshal decodes and validates a session file. It refuses, with an error
// wrapping ErrCorrupt and a one-line reason, a file that is not complete
// JSON, has no version or id, or whose history does not start with the
// system message; and, with an error wrapping ErrVersion, a file whose
// version is newer than Version. Unknown fields are ignored, so that fields
// added later without a version bump (see docs/session-format.md) do not
// make older builds refuse the file.
func Unmarshal(data []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		// A file from a newer mm may not fit this struct at all; saying
		// "newer version" is then more useful than "corrupt".
		if v, ok := peekVersion(data); ok && v > Version {
			return nil, versionError(v)
		}
		return nil, corrupt(jsonReason(err))
	}
	switch {
	case f.Version > Version:
		return nil, versionError(f.Version)
	case f.Version < 1:
		return nil, corrupt("missing or invalid version")
	case f.ID == "":
		return nil, corrupt("missing id")
	case len(f.History) > 0 && f.History[0].Role != history.RoleSystem:
		return nil, corrupt(fmt.Sprintf("history starts with a %q message, not the system prompt", f.History[0].Role))
	}
	return &f, nil
}

// Load reads and validates the session file at path. A missing file gives an
// error wrapping both ErrNotFound and fs.ErrNotExist; a path that is not a
// regular file, or a file larger than DefaultMaxFileBytes, one wrapping
// ErrRefused; anything else that Unmarshal refuses keeps its ErrCorrupt or
// ErrVersion. Every error names the path and fits on one line. It checks
// no signature (Signed is false): mm reads through a Reader with its Key.
func Load(path string) (*File, error) { return (&Reader{}).Load(path) }

func corrupt(reason string) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, oneLine(reason))
}

func versionError(v int) error {
	return fmt.Errorf("%w: the file has format version %d, this mm reads up to %d; upgrade mm to load it", ErrVersion, v, Version)
}

// jsonReason words a decoding error with the byte where it happened, which
// is what someone looking at a damaged file needs.
func jsonReason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("%s at byte %d", syn.Error(), syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s at byte %d", strings.TrimPrefix(typ.Error(), "json: "), typ.Offset)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// oneLine keeps error messages on one line, as the ACP error text and the
// log lines that carry them expect.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// peekVersion reads the top-level "version" of a file that failed to decode,
// without needing the rest of it to be valid.
func peekVersion(data []byte) (int, bool) {
	h, err := readHeader(json.NewDecoder(bytes.NewReader(data)))
	if err != nil && !h.hasVersion {
		return 0, false
	}
	return h.version, h.hasVersion
}
