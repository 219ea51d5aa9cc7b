package tools

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
)

//go:embed read_file.md
var readFileDescription string

// readFileArgs are read_file's parameters.
type readFileArgs struct {
	Path   string `json:"path" alias:"file_path,filePath,file" jsonschema:"The file to read: absolute, relative to the working directory, or starting with ~."`
	Offset int    `json:"offset,omitempty" min:"1" jsonschema:"The first line to show, counting from 1. Default 1."`
	Limit  int    `json:"limit,omitempty" min:"1" jsonschema:"How many lines to show at most. Default 2000, fewer when they do not fit the context window."`
}

var readFileSpec = specFor[readFileArgs]("read_file")

// binarySniff is how much of a file's head is searched for a NUL byte to
// tell a binary file from text, as git and grep do.
const binarySniff = 8000

// maxDirEntries bounds the listing given when read_file is called on a
// directory: enough to find the intended file, not a flood.
const maxDirEntries = 200

type readFileTool struct{}

func (readFileTool) Name() string            { return "read_file" }
func (readFileTool) Description() string     { return readFileDescription }
func (readFileTool) Schema() json.RawMessage { return readFileSpec.schemaCopy() }
func (readFileTool) Kind() Kind              { return KindRead }

func (readFileTool) spec() *spec { return readFileSpec }

func (readFileTool) prepare(env Env, c *Call) error {
	p, err := pathArg("read_file", env, c, argsOf[readFileArgs](c).Path)
	if err != nil {
		return err
	}
	c.Locations = []string{p}
	return nil
}

// pathArg checks the "path" argument, given, sets the title, and resolves
// the path.
func pathArg(tool string, env Env, c *Call, given string) (string, error) {
	c.Title = tool + ": " + given
	if strings.TrimSpace(given) == "" {
		return "", fmt.Errorf(`%s: argument "path" is empty; give the file's path`, tool)
	}
	return Resolve(env.Cwd, given), nil
}

func (readFileTool) run(ctx context.Context, env Env, c *Call) Result {
	a := argsOf[readFileArgs](c)
	p := Resolve(env.Cwd, a.Path)
	offset, limit := max(a.Offset, 1), a.Limit

	f, err := os.Open(p)
	if err != nil {
		return Result{Output: openError(p, err), Failed: true}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Result{Output: fmt.Sprintf("[cannot read %s: %v]", p, err), Failed: true}
	}
	if st.IsDir() {
		return Result{Output: dirError(f, p), Failed: true}
	}
	// A FIFO or a device could block forever or never end; only regular
	// files are read (files in /proc are regular, and work).
	if !st.Mode().IsRegular() {
		return Result{Output: fmt.Sprintf("[cannot read %s: not a regular file (%s)]", p, st.Mode().Type()), Failed: true}
	}
	return readLines(ctx, f, p, offset, limit, st.Size(), env.Output.budget())
}

// What read_file shows by default, and how: each line with its number
// (cat -n's form, the number right-aligned in six columns and a tab), at
// most DefaultReadLines lines, each cut after MaxLineBytes.
const (
	DefaultReadLines = 2000
	MaxLineBytes     = 2000
)

// numberLine writes line n of a file as read_file shows it, its text
// without its newline.
func numberLine(b *strings.Builder, n int, text []byte, cut int64) {
	if cut == 0 {
		text = bytes.TrimSuffix(text, []byte("\r")) // a CRLF file's lines read as any
	}
	fmt.Fprintf(b, "%6d\t", n)
	b.Write(text)
	if cut > 0 {
		fmt.Fprintf(b, " [… %s more in this line]", count(cut, "byte"))
	}
	b.WriteByte('\n')
}

// readLines streams the file, numbering the lines asked for (limit 0:
// DefaultReadLines) and keeping them within budget bytes, while counting
// every line so that the last line can tell the model how much more there
// is. A large file costs no more memory than the output.
func readLines(ctx context.Context, f io.Reader, p string, offset, limit int, sizeHint int64, budget int) Result {
	// The buffers are sized from the file's size so that the common small
	// file costs little; files in /proc report 0 and get the minimum.
	br := bufio.NewReaderSize(f, int(min(max(sizeHint+1, 2*binarySniff), 64<<10)))
	if head, _ := br.Peek(binarySniff); bytes.IndexByte(head, 0) >= 0 {
		return Result{Output: fmt.Sprintf("[%s is a binary file; read_file shows text only. Use bash (e.g. `file`, `xxd | head`) to inspect it]", p), Failed: true}
	}
	if limit <= 0 {
		limit = DefaultReadLines
	}
	last := offset + limit - 1 // the last line wanted
	if last < offset {
		last = int(^uint(0) >> 1)
	}
	// A line is cut short enough that one always fits the budget with its
	// number and its note.
	lineCap := min(MaxLineBytes, max(budget/2, 64))

	var (
		out       strings.Builder
		line      = 1    // the line the next chunk belongs to
		text      []byte // what is kept of the current line
		lineLen   int64  // the current line's length, its newline aside
		partial   bool   // the current line has started but not ended
		size      int64  // bytes read so far
		shownEnd  int64  // size at the end of the last line shown
		firstShow = 0    // first line shown, 0 if none yet
		lastShown = 0    // last line shown
		full      bool   // the budget stopped the output
		chunks    = 0
	)
	if offset == 1 {
		out.Grow(int(min(sizeHint+sizeHint/4, int64(budget))))
	}
	// show adds the current line if it is wanted and fits.
	show := func() {
		if line < offset || line > last || full {
			return
		}
		kept := text[:completeLen(string(text))]
		var b strings.Builder
		numberLine(&b, line, kept, lineLen-int64(len(kept)))
		if out.Len()+b.Len() > budget && firstShow != 0 {
			full = true
			return
		}
		out.WriteString(b.String())
		if firstShow == 0 {
			firstShow = line
		}
		lastShown, shownEnd = line, size
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			size += int64(len(chunk))
			partial = true
			ended := chunk[len(chunk)-1] == '\n'
			content := chunk
			if ended {
				content = chunk[:len(chunk)-1]
			}
			lineLen += int64(len(content))
			if line >= offset && line <= last && !full {
				text = append(text, content[:min(len(content), max(lineCap-len(text), 0))]...)
			}
			if ended {
				show()
				line++
				text, lineLen, partial = text[:0], 0, false
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				break
			}
			return Result{Output: fmt.Sprintf("[error reading %s: %v]", p, err), Failed: true}
		}
		if chunks++; chunks%1024 == 0 && ctx.Err() != nil {
			return Result{Output: "[cancelled]", Failed: true}
		}
		if (line > last || full) && !partial {
			// Nothing more will be shown: the rest is only counted, in
			// large blocks rather than line by line.
			n, ended, err := countLines(ctx, br)
			if err != nil && ctx.Err() != nil {
				return Result{Output: "[cancelled]", Failed: true}
			}
			if err != nil {
				return Result{Output: fmt.Sprintf("[error reading %s: %v]", p, err), Failed: true}
			}
			line += n.lines
			size += n.bytes
			partial = !ended
			break
		}
	}
	if partial {
		// The last line has no final newline; it still counts.
		show()
		line++
	}
	total := line - 1

	if total == 0 {
		return Result{Output: fmt.Sprintf("[%s is empty]", p)}
	}
	if offset > total {
		return Result{Output: fmt.Sprintf("[offset %d is past the end of %s, which has %d lines]", offset, p, total), Failed: true}
	}
	body := out.String()
	if firstShow == 1 && lastShown == total {
		return Result{Output: body}
	}
	more := size - shownEnd
	switch {
	case lastShown == total:
		body += fmt.Sprintf("[lines %d-%d of %d]", firstShow, lastShown, total)
	case full:
		body += fmt.Sprintf("[lines %d-%d of %d; output limit of %s reached, %d more bytes; use offset=%d to read more]", firstShow, lastShown, total, count(int64(budget), "byte"), more, lastShown+1)
	default:
		body += fmt.Sprintf("[lines %d-%d of %d; %d more bytes; use offset=%d to read more]", firstShow, lastShown, total, more, lastShown+1)
	}
	return Result{Output: body}
}

// openError words a failure to open a file for the model.
func openError(p string, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("[%s does not exist]", p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("[permission denied: %s]", p)
	}
	return fmt.Sprintf("[cannot read %s: %v]", p, err)
}

// dirError tells the model it gave a directory, and lists the directory so
// that the next call can name the right file.
func dirError(f *os.File, p string) string {
	entries, err := f.ReadDir(-1)
	if err != nil {
		return fmt.Sprintf("[%s is a directory, not a file]", p)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var b strings.Builder
	fmt.Fprintf(&b, "[%s is a directory, not a file; read_file reads files. It has %d entries", p, len(entries))
	if len(entries) == 0 {
		b.WriteString("]")
		return b.String()
	}
	b.WriteString(":]\n")
	for i, e := range entries {
		if i == maxDirEntries {
			fmt.Fprintf(&b, "[… %d more entries]\n", len(entries)-maxDirEntries)
			break
		}
		b.WriteString(e.Name())
		if e.IsDir() {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// lineTally is what countLines found.
type lineTally struct {
	lines int   // newlines seen
	bytes int64 // bytes seen
}

// countLines reads r to its end, counting newlines. ended says whether
// the data was empty or ended with a newline, that is whether no line is
// left open.
func countLines(ctx context.Context, r io.Reader) (t lineTally, ended bool, err error) {
	buf := make([]byte, 64<<10)
	ended = true
	for i := 0; ; i++ {
		n, rerr := r.Read(buf)
		if n > 0 {
			t.lines += bytes.Count(buf[:n], []byte{'\n'})
			t.bytes += int64(n)
			ended = buf[n-1] == '\n'
		}
		if rerr == io.EOF {
			return t, ended, nil
		}
		if rerr != nil {
			return t, ended, rerr
		}
		if i%256 == 255 && ctx.Err() != nil {
			return t, ended, ctx.Err()
		}
	}
}
