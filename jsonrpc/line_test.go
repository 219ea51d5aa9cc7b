package jsonrpc

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestReadLine: lines up to max bytes come whole, without their newline; a
// longer one is read to its end and comes as its size and its first
// HeadBytes, and the line after it is read as usual.
func TestReadLine(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"text":"` + strings.Repeat("a", 3*HeadBytes) + `"}}`
	in := "short\n" + strings.Repeat("b", 10) + "\n" + strings.Repeat("c", 11) + "\n" + long + "\nlast"
	// A small buffer: lines cross many ReadSlice fragments.
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	type want struct {
		line string
		size int
		err  error
	}
	for i, w := range []want{{"short", 5, nil}, {strings.Repeat("b", 10), 10, nil}, {"", 11, nil}, {"", len(long), nil}, {"last", 4, io.EOF}} {
		line, head, size, err := ReadLine(r, 10)
		if string(line) != w.line || size != w.size || err != w.err {
			t.Fatalf("line %d: %q (%d bytes) %v, want %q (%d) %v", i, line, size, err, w.line, w.size, w.err)
		}
		if line == nil && w.line == "" && w.err == nil && len(head) == 0 {
			t.Errorf("line %d: too long, and no head", i)
		}
		if i == 3 {
			if len(head) != HeadBytes {
				t.Errorf("head of the long line: %d bytes, want %d", len(head), HeadBytes)
			}
			answer := LineTooLong(head, size, "10B")
			if id := gjson.GetBytes(answer, "id").Raw; id != "7" || gjson.GetBytes(answer, "error.code").Int() != -32600 || answer[len(answer)-1] != '\n' {
				t.Errorf("answer to the long line: %s", answer)
			}
		}
	}
}

// TestReadLineInto: the same lines as ReadLine's, in one array when it has
// room, and a line too long still gives its head and size.
func TestReadLineInto(t *testing.T) {
	in := "first\n" + strings.Repeat("x", 40) + "\nsecond\n"
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	buf := make([]byte, 0, 32)
	line, _, _, err := ReadLineInto(r, 32, buf)
	if string(line) != "first" || err != nil || &line[:1][0] != &buf[:1][0] {
		t.Fatalf("first: %q %v (same array: %v)", line, err, &line[:1][0] == &buf[:1][0])
	}
	line, head, size, err := ReadLineInto(r, 32, line)
	if line != nil || size != 40 || strings.TrimSuffix(string(head), "\n") != strings.Repeat("x", 40) || err != nil {
		t.Fatalf("too long: %q, head %q, %d bytes, %v", line, head, size, err)
	}
	line, _, _, err = ReadLineInto(r, 32, buf)
	if string(line) != "second" || err != nil {
		t.Fatalf("second: %q %v", line, err)
	}
	if _, _, _, err = ReadLineInto(r, 32, buf); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
