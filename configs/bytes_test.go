package configs

import (
	"strings"
	"testing"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want Bytes
	}{
		{"acp:\n  maxLineBytes: 64MiB\n", 64 << 20},
		{"acp:\n  maxLineBytes: 512KiB\n", 512 << 10},
		{"acp:\n  maxLineBytes: 1GiB\n", 1 << 30},
		{"acp:\n  maxLineBytes: 2048\n", 2048},
		{"acp:\n  maxLineBytes: 3 MB\n", 3 << 20},
	} {
		c, err := Parse([]byte(tc.yaml), "test.yaml")
		if err != nil || c.ACP.MaxLineBytes != tc.want {
			t.Errorf("%q: %v %v, want %d", tc.yaml, c.ACP.MaxLineBytes, err, tc.want)
		}
	}
	for _, bad := range []string{"lots", "-1MiB", "1.5MiB", "12TiB"} {
		if _, err := Parse([]byte("acp:\n  maxLineBytes: "+bad+"\n"), "test.yaml"); err == nil || !strings.Contains(err.Error(), "not a size") {
			t.Errorf("%q: %v, want an error saying it is not a size", bad, err)
		}
	}
	if _, err := Parse([]byte("acp:\n  maxLineBytes: 10\n"), "test.yaml"); err == nil || !strings.Contains(err.Error(), "acp.maxLineBytes") {
		t.Errorf("a tiny limit: %v", err)
	}
	if got := Bytes(64 << 20).String(); got != "64MiB" {
		t.Errorf("String = %q", got)
	}
}
