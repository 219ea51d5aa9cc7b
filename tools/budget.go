package tools

import (
	"github.com/mm-agent/mm/sandbox"

	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A tool result is sized to the model's context window: the model reads at
// most Output.Budget bytes of it. A longer output keeps its first and its
// last lines, cut at line boundaries, with a line between them that says
// how many lines and bytes were left out and names the file of the
// session's folder that holds the whole output, which the model may search
// (rg, grep) or read in parts (read_file offset/limit).

// The defaults of the budget's bounds and of the folder's
// (tools.output.minBytes, maxBytes and keepBytes). MaxOutputBytes, above,
// bounds maxBytes.
const (
	DefaultMinOutputBytes = 4 << 10
	DefaultMaxOutputBytes = 48 << 10
	DefaultKeepBytes      = 256 << 20
	// unknownWindowBytes is the budget when the window is not known (the
	// server did not say, nor the config), within the bounds.
	unknownWindowBytes = 16 << 10
)

// OutputBudget is the most bytes of one tool result a model whose context
// window is window tokens reads: a tenth of the window, at about four
// bytes a token, within [minBytes, maxBytes]. An unknown window (0) gets
// 16 KiB within them.
func OutputBudget(window, minBytes, maxBytes int) int {
	if maxBytes <= 0 || maxBytes > MaxOutputBytes {
		maxBytes = MaxOutputBytes
	}
	minBytes = min(max(minBytes, 1<<10), maxBytes)
	b := unknownWindowBytes
	if window > 0 {
		b = window * 4 / 10
	}
	return min(max(b, minBytes), maxBytes)
}

// Output is how a call's result is sized, and where its whole text is kept
// when it is cut.
type Output struct {
	// Budget is the most bytes of the result the model reads
	// (OutputBudget); 0 is DefaultMaxOutputBytes.
	Budget int
	// Dir is the session's folder of whole outputs, made on first use and
	// removed with the session; "" keeps none.
	Dir string
	// Name is the call's file in Dir ("call_12.out"); "" makes one up.
	Name string
	// Keep bounds what Dir holds: the oldest files go first to make room
	// for a new one, and a file that alone would outgrow it is cut. 0 is
	// DefaultKeepBytes.
	Keep int64
	// Owner, when set, is given Dir and its files (mm run by root, whose
	// confined commands run as another user: sandbox.user), so that the
	// session's commands can read what the model is told is there.
	Owner *sandbox.Ident
}

func (o Output) budget() int {
	if o.Budget <= 0 {
		return DefaultMaxOutputBytes
	}
	return min(o.Budget, MaxOutputBytes)
}

// The share of the room that goes to the output's head: a command's
// errors and summary come last, a document's substance first.
const (
	commandHead  = 0.4
	documentHead = 0.8
)

// fit returns text as the model reads it: whole when it fits the budget,
// else cut (capture) with its whole text kept in the call's file.
func (o Output) fit(text string, headShare float64) string {
	if len(text) <= o.budget() {
		return text
	}
	c := newCapture(o, headShare)
	c.WriteString(text)
	return c.String()
}

// markerRoom is what the budget keeps for the line between head and tail.
const markerRoom = 400

// capture takes an output as it is written and keeps, in bounded memory,
// what the model will read of it: everything while it fits the budget;
// past it, its head and its tail, and the whole of it in the call's file.
// It is written by one goroutine and read once that is done.
type capture struct {
	out       Output
	headShare float64
	buf       []byte // the whole output, while it fits
	head      []byte // past the budget: its first bytes
	tail      []byte // and its last (up to twice tailMax, compacted)
	headMax   int
	tailMax   int
	total     int64
	newlines  int64
	last      byte // the last byte written
	over      bool // the output outgrew the budget
	file      *spill
}

func newCapture(o Output, headShare float64) *capture {
	room := max(o.budget()-markerRoom, 256)
	headMax := int(float64(room) * headShare)
	return &capture{out: o, headShare: headShare, headMax: headMax, tailMax: room - headMax}
}

func (c *capture) WriteString(s string) { _, _ = c.Write([]byte(s)) }

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	c.total += int64(n)
	c.newlines += int64(strings.Count(string(p), "\n"))
	c.last = p[n-1]
	if !c.over {
		if len(c.buf)+n <= c.out.budget() {
			c.buf = append(c.buf, p...)
			return n, nil
		}
		// Past the budget: the whole output goes to the file from now
		// on, and memory keeps the head and the tail.
		c.over = true
		c.file = openSpill(c.out)
		c.file.write(c.buf)
		k := min(c.headMax, len(c.buf))
		c.head = append([]byte(nil), c.buf[:k]...)
		c.tail = append(c.tail, c.buf[k:]...)
		c.buf = nil
	}
	c.file.write(p)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	// Compacted only at twice its size: amortised O(1) per byte.
	if len(c.tail) > 2*c.tailMax {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailMax:]...)
	}
	return n, nil
}

// String renders the capture for the model and closes the call's file.
func (c *capture) String() string {
	if !c.over {
		return string(c.buf)
	}
	c.file.close()
	head := lineHead(string(c.head), c.headMax)
	tail := lineTail(string(c.tail), c.tailMax)
	lines := c.newlines
	if c.last != '\n' {
		lines++
	}
	shown := int64(strings.Count(head, "\n") + strings.Count(tail, "\n"))
	if tail != "" && !strings.HasSuffix(tail, "\n") {
		shown++
	}
	if head != "" && !strings.HasSuffix(head, "\n") {
		shown++ // a line cut short counts as shown
	}
	leftBytes := c.total - int64(len(head)) - int64(len(tail))
	var b strings.Builder
	b.Grow(len(head) + len(tail) + markerRoom)
	b.WriteString(head)
	if head != "" && !strings.HasSuffix(head, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… %s (%s) left out of %s (%s) to fit the context window; %s]\n",
		count(max(lines-shown, 0), "line"), count(leftBytes, "byte"), count(lines, "line"), count(c.total, "byte"), c.file.where())
	b.WriteString(tail)
	return b.String()
}

// lineHead is the longest run of whole lines at the start of s within n
// bytes; when the first line alone is longer, its first n bytes.
func lineHead(s string, n int) string {
	s = s[:completeLen(s[:min(n, len(s))])]
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return s
}

// lineTail is the longest run of whole lines at the end of s within n
// bytes, s's first line taken for a part of one; when the last line alone
// is longer, its last n bytes.
func lineTail(s string, n int) string {
	cut := s[validSuffixStart(s, n):]
	body := strings.TrimSuffix(cut, "\n")
	if i := strings.IndexByte(body, '\n'); i >= 0 {
		return cut[i+1:]
	}
	return cut
}

// count writes n with its unit, in the plural when it must be: "1 line",
// "12,345 bytes".
func count(n int64, unit string) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n != 1 {
		unit += "s"
	}
	return s + " " + unit
}

// spill is the file of the session's folder that keeps a cut output whole.
type spill struct {
	path    string
	f       *os.File
	written int64
	// room is what the folder may still take for this file.
	room int64
	// short says the file holds only the output's first bytes: the
	// folder's bound was reached.
	short bool
	err   error
}

// openSpill makes the call's file in the session's folder, after making
// room for it there. The spill it returns is never nil: a file that could
// not be made says why in where.
func openSpill(o Output) *spill {
	if o.Dir == "" {
		return &spill{err: errors.New("no folder keeps outputs here")}
	}
	if err := makeOutputDir(o.Dir, o.Owner); err != nil {
		return &spill{err: err}
	}
	name := o.Name
	if name == "" {
		name = "output-" + rand.Text()[:8] + ".out"
	}
	keep := o.Keep
	if keep <= 0 {
		keep = DefaultKeepBytes
	}
	path := filepath.Join(o.Dir, filepath.Base(name))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil && o.Owner != nil {
		if err = f.Chown(int(o.Owner.UID), int(o.Owner.GID)); err != nil {
			f.Close()
		}
	}
	if err != nil {
		return &spill{err: err}
	}
	return &spill{path: path, f: f, room: keep - folderSize(o.Dir, path)}
}

// makeOutputDir makes dir. Under OutputsRoot, in a temporary folder that
// every user writes, the root must be this user's own (not a link, not
// another user's, writable by no one else): another user who made it
// first could read what it holds. Given an owner (mm run by root), dir is
// the owner's, and the folders above it only searchable by others: the
// owner's commands reach their own folder, and list none.
func makeOutputDir(dir string, owner *sandbox.Ident) error {
	root := OutputsRoot()
	if Inside(dir, root) {
		if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if owner != nil {
			if err := os.Chmod(root, 0o711); err != nil {
				return err
			}
		}
		fi, err := os.Lstat(root)
		if err != nil {
			return err
		}
		if !fi.IsDir() || !ownedByUs(fi) {
			return fmt.Errorf("%s is not this user's own folder", root)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil || owner == nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	return os.Chown(dir, int(owner.UID), int(owner.GID))
}

// write appends p to the file, making room in the folder as it grows: the
// folder's oldest other files are removed first; when the file alone fills
// it, the rest of the output is not kept.
func (s *spill) write(p []byte) {
	if s.f == nil || s.short {
		return
	}
	if s.written+int64(len(p)) > s.room {
		s.room += evictOldest(filepath.Dir(s.path), s.path, s.written+int64(len(p))-s.room)
	}
	if over := s.written + int64(len(p)) - s.room; over > 0 {
		p = p[:max(int64(len(p))-over, 0)]
		s.short = true
	}
	n, err := s.f.Write(p)
	s.written += int64(n)
	if err != nil {
		s.err, s.short = err, true
	}
}

func (s *spill) close() {
	if s.f != nil {
		if err := s.f.Close(); err != nil && s.err == nil {
			s.err, s.short = err, true
		}
		s.f = nil
	}
}

// where tells the model where the whole output is, and how to read it.
func (s *spill) where() string {
	const filter = "filter the output (grep, head, tail) or write it to a file to see the rest"
	switch {
	case s.path == "":
		return "not kept (" + s.err.Error() + "): " + filter
	case s.short && s.err != nil:
		return fmt.Sprintf("the first %s of the output are in %s (not all: %v): search it with rg or grep, or read parts with read_file offset/limit", count(s.written, "byte"), s.path, s.err)
	case s.short:
		return fmt.Sprintf("the first %s of the output are in %s (the session's outputs fill their folder): search it with rg or grep, or read parts with read_file offset/limit", count(s.written, "byte"), s.path)
	}
	return "the whole output is in " + s.path + ": search it with rg or grep, or read parts with read_file offset/limit"
}

// folderSize is the bytes of the regular files of dir but except.
func folderSize(dir, except string) int64 {
	var n int64
	for _, f := range folderFiles(dir) {
		if f.path != except {
			n += f.size
		}
	}
	return n
}

type folderFile struct {
	path string
	size int64
	mod  time.Time
}

func folderFiles(dir string) []folderFile {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []folderFile
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			out = append(out, folderFile{path: filepath.Join(dir, e.Name()), size: info.Size(), mod: info.ModTime()})
		}
	}
	return out
}

// evictOldest removes the oldest files of dir but keep until need bytes
// are freed, and returns how many were.
func evictOldest(dir, keep string, need int64) int64 {
	files := folderFiles(dir)
	slices.SortFunc(files, func(a, b folderFile) int { return a.mod.Compare(b.mod) })
	var freed int64
	for _, f := range files {
		if freed >= need {
			break
		}
		if f.path == keep {
			continue
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			freed += f.size
		}
	}
	return freed
}
