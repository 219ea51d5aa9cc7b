package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOutputBudget(t *testing.T) {
	for _, tt := range []struct{ window, minB, maxB, want int }{
		{8192, DefaultMinOutputBytes, DefaultMaxOutputBytes, 4096},       // a tenth is 3,276: the floor
		{32768, DefaultMinOutputBytes, DefaultMaxOutputBytes, 13107},     // a tenth of the window
		{200000, DefaultMinOutputBytes, DefaultMaxOutputBytes, 48 << 10}, // the cap
		{0, DefaultMinOutputBytes, DefaultMaxOutputBytes, 16 << 10},      // unknown
		{0, 32 << 10, 64 << 10, 32 << 10},                                // unknown, within the bounds
		{1 << 20, 0, 1 << 30, MaxOutputBytes},                            // never past MaxOutputBytes
		{1000, 100, 0, 1 << 10},                                          // a floor of 1 KiB at least
	} {
		if got := OutputBudget(tt.window, tt.minB, tt.maxB); got != tt.want {
			t.Errorf("OutputBudget(%d, %d, %d) = %d, want %d", tt.window, tt.minB, tt.maxB, got, tt.want)
		}
	}
}

// lineText is lines "line 1\n" … "line n\n".
func lineText(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestFitCutsAtLines: a text over the budget keeps whole lines at both
// ends, within the budget, says how many lines and bytes are left out, and
// its file holds the whole text; one within the budget is left alone.
func TestFitCutsAtLines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	o := Output{Budget: 2048, Dir: dir, Name: "call_1.out"}
	text := lineText(5000)
	for _, share := range []float64{commandHead, documentHead} {
		got := o.fit(text, share)
		if len(got) > o.Budget {
			t.Errorf("share %v: %d bytes, over the budget", share, len(got))
		}
		head, rest, ok := strings.Cut(got, "[… ")
		if !ok {
			t.Fatalf("no marker: %q", got)
		}
		marker, tail, _ := strings.Cut(rest, "]\n")
		if !strings.HasPrefix(head, "line 1\nline 2\n") || !strings.HasSuffix(head, "\n") || !strings.HasSuffix(tail, "line 5000\n") || !strings.HasPrefix(tail, "line ") {
			t.Errorf("share %v: lines not whole: %.30q … %q", share, head, tail)
		}
		shown := strings.Count(head, "\n") + strings.Count(tail, "\n")
		want := fmt.Sprintf("%s (%s) left out of 5,000 lines (%s) to fit the context window; the whole output is in %s:",
			count(int64(5000-shown), "line"), count(int64(len(text)-len(head)-len(tail)), "byte"), count(int64(len(text)), "byte"), filepath.Join(dir, "call_1.out"))
		if !strings.HasPrefix(marker, want) {
			t.Errorf("share %v: marker %q, want it to start %q", share, marker, want)
		}
		if share == commandHead && len(head) > len(tail) || share == documentHead && len(head) < len(tail) {
			t.Errorf("share %v: head %d bytes, tail %d", share, len(head), len(tail))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "call_1.out")); err != nil || string(b) != text {
			t.Errorf("the file holds %d bytes (%v), want %d", len(b), err, len(text))
		}
	}
	if small := lineText(10); o.fit(small, commandHead) != small {
		t.Error("a text within the budget was changed")
	}
}

// TestFitOneLongLine: a line longer than the budget shows its start and
// its end, characters whole.
func TestFitOneLongLine(t *testing.T) {
	text := strings.Repeat("é", 5000) // 2 bytes each
	got := Output{Budget: 1024, Dir: t.TempDir()}.fit(text, commandHead)
	if !strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, "éé") || !strings.Contains(got, "[… 0 lines (") || len(got) > 1024 {
		t.Errorf("got %d bytes: %.40q … %q", len(got), got, got[len(got)-20:])
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Error("a character was cut in two")
	}
}

// TestFitWithoutFolder: with no folder the output is cut all the same and
// the model is told to filter it.
func TestFitWithoutFolder(t *testing.T) {
	got := Output{Budget: 1024}.fit(lineText(1000), commandHead)
	if !strings.Contains(got, "not kept (no folder keeps outputs here): filter the output") || len(got) > 1024 {
		t.Errorf("got %q", got)
	}
}

// TestFolderBound: the session's folder keeps at most Keep bytes: older
// files go first, and a file that alone outgrows it keeps the output's
// first bytes, as its marker says.
func TestFolderBound(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "call_1.out")
	if err := os.WriteFile(old, []byte(strings.Repeat("x", 30000)), 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	o := Output{Budget: 1024, Dir: dir, Name: "call_2.out", Keep: 50000}
	text := lineText(3000) // 29,893 bytes: call_1 must go
	got := o.fit(text, commandHead)
	if _, err := os.Stat(old); err == nil {
		t.Error("the oldest file was kept past the folder's bound")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "call_2.out")); string(b) != text || !strings.Contains(got, "the whole output is in") {
		t.Errorf("the new file holds %d bytes; marker %q", len(b), got)
	}

	o.Name, o.Keep = "call_3.out", 10000
	got = o.fit(text, commandHead)
	b, _ := os.ReadFile(filepath.Join(dir, "call_3.out"))
	if len(b) != 10000 || text[:10000] != string(b) || !strings.Contains(got, "the first 10,000 bytes of the output are in "+filepath.Join(dir, "call_3.out")+" (the session's outputs fill their folder)") {
		t.Errorf("the file holds %d bytes; marker %q", len(b), got)
	}
	if _, err := os.Stat(filepath.Join(dir, "call_2.out")); err == nil {
		t.Error("call_2.out was kept past the folder's bound")
	}
}
