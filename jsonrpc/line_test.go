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
