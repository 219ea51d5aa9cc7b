package store

import (
	"context"
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

// BenchmarkSave200 saves a 200-message session through each backend's
// Writer, one save at a time, as a turn's reply waits for it: the file
// store's WriteAtomic (write, fsync, rename, fsync of the folder), and
// Postgres's fenced UPDATE of the row (run with MM_PGTEST_FSYNC=1 for a
// server that syncs its commits, as the file store does).
func BenchmarkSave200(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			be := bk.open(b, 0)
			cwd := b.TempDir()
			f := file("20260916-101530-4f2a9c1e", 200, 500)
			f.Cwd = cwd
			data := mustMarshal(b, f)
			if err := be.Create(context.Background(), cwd, f.ID, data); err != nil {
				b.Fatal(err)
			}
			loaded, _, err := be.Load(context.Background(), cwd, f.ID)
			if err != nil {
				b.Fatal(err)
			}
			w := be.Writer(cwd, f.ID, loaded.Rev, func(err error) { b.Error(err) })
			defer w.Close()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				save(w, data)
			}
		})
	}
}

// BenchmarkFoldersNotOf100 is what each confined command of a token on
// mm serve asks the store first (the folders other tokens own, to hide),
// with 100 folders recorded: in files and in Postgres.
func BenchmarkFoldersNotOf100(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			s := bk.open(b, 0)
			ctx := context.Background()
			for i := range 100 {
				if err := s.ClaimFolders(ctx, fmt.Sprint("owner", i%10), []string{fmt.Sprintf("/work/p%03d", i)}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if got, err := s.FoldersNotOf(ctx, "owner0"); err != nil || len(got) != 90 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

// BenchmarkClaimFoldersOwned is what session/new of a token in a folder it
// owns already asks the store (nothing is written), with 100 folders
// recorded.
func BenchmarkClaimFoldersOwned(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			s := bk.open(b, 0)
			ctx := context.Background()
			for i := range 100 {
				if err := s.ClaimFolders(ctx, fmt.Sprint("owner", i%10), []string{fmt.Sprintf("/work/p%03d", i)}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.ClaimFolders(ctx, "owner0", []string{"/work/p000/sub"}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
