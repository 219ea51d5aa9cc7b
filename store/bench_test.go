package store

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// The benchmarks use a 200-message history of ~500-byte contents (user
// prompts, assistant messages calling bash, tool answers with their ACP
// bookkeeping): a long but ordinary session.

func BenchmarkMarshal200(b *testing.B) {
	f := file("20260916-101530-4f2a9c1e", 200, 500)
	b.SetBytes(int64(len(mustMarshal(b, f))))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteAtomic200(b *testing.B) {
	data := mustMarshal(b, file("20260916-101530-4f2a9c1e", 200, 500))
	path := filepath.Join(b.TempDir(), "sessions", "20260916-101530-4f2a9c1e.json")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteAtomic(path, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoad200(b *testing.B) {
	data := mustMarshal(b, file("20260916-101530-4f2a9c1e", 200, 500))
	path := filepath.Join(b.TempDir(), "20260916-101530-4f2a9c1e.json")
	if err := WriteAtomic(path, data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkList100(b *testing.B) {
	cwd := b.TempDir()
	const dir = ".mm/sessions"
	for i := range 100 {
		f := file(fmt.Sprintf("20260916-1015%02d-4f2a9c1e", i), 200, 500)
		f.Updated = t0.Add(time.Duration(i) * time.Minute)
		if err := WriteAtomic(Path(cwd, dir, f.ID), mustMarshal(b, f)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := List(cwd, dir)
		if err != nil || len(s) != 100 {
			b.Fatal(len(s), err)
		}
	}
}

// BenchmarkSignedMarshal200 is BenchmarkMarshal200 with the signature mm
// writes: the cost of the HMAC on every save.
func BenchmarkSignedMarshal200(b *testing.B) {
	f := file("20260916-101530-4f2a9c1e", 200, 500)
	key := OpenKey(b.TempDir(), nil)
	b.SetBytes(int64(len(mustMarshal(b, f))))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := key.Marshal(f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignedLoad200 is BenchmarkLoad200 through the Reader mm uses,
// the signature checked.
func BenchmarkSignedLoad200(b *testing.B) {
	key := OpenKey(b.TempDir(), nil)
	data, err := key.Marshal(file("20260916-101530-4f2a9c1e", 200, 500))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "20260916-101530-4f2a9c1e.json")
	if err := WriteAtomic(path, data); err != nil {
		b.Fatal(err)
	}
	r := &Reader{Key: key}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if f, err := r.Load(path); err != nil || !f.Signed {
			b.Fatal(err)
		}
	}
}
