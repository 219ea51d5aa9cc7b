package tools

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkBashTrue measures the fixed cost of one bash call: the pipe,
// the process group, fork/exec of bash, and the reap.
func BenchmarkBashTrue(b *testing.B) {
	env := Env{Cwd: b.TempDir()}
	c, err := Prepare(env, "bash", `{"command":"true"}`)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r := Run(ctx, env, c); r.Failed {
			b.Fatal(r.Output)
		}
	}
}

// BenchmarkReadFile reads a 1000-line source-sized file whole.
func BenchmarkReadFile(b *testing.B) {
	cwd := b.TempDir()
	p := filepath.Join(cwd, "src.go")
	content := numbered(1000)
	if err := writeAtomic(p, content); err != nil {
		b.Fatal(err)
	}
	env := Env{Cwd: cwd}
	c, err := Prepare(env, "read_file", `{"path":"src.go"}`)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if r := Run(ctx, env, c); r.Failed || len(r.Output) != len(content) {
			b.Fatal(r.Output)
		}
	}
}
