package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestPGMigrate: mm processes starting at once against an empty database
// all find one schema made once; a database a newer mm migrated is refused
// with a line that says to upgrade.
func TestPGMigrate(t *testing.T) {
	url := pgURL(t)
	ctx := testwait.Context(t)
	var wg sync.WaitGroup
	stores := make([]*PGStore, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = OpenPostgres(ctx, url, 0) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("start %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	s := stores[0]
	var n, v int
	if err := s.pool.QueryRow(ctx, `SELECT count(*), max(version) FROM mm_schema`).Scan(&n, &v); err != nil || n != 1 || v != schemaVersion {
		t.Fatalf("mm_schema: %d row(s), version %d, %v", n, v, err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE mm_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	_, err := OpenPostgres(ctx, url, 0)
	if err == nil || !strings.Contains(err.Error(), "version 99") || !strings.Contains(err.Error(), "upgrade mm") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a newer schema: %v", err)
	}
	t.Log(err)
}

// TestPGOpenErrors: a store.url that cannot be used fails at start, in
// one line naming the key, without the password.
func TestPGOpenErrors(t *testing.T) {
	ctx := testwait.Context(t)
	for _, url := range []string{
		"postgres://mm:s3cret@127.0.0.1:1/postgres?connect_timeout=5",
		"postgres://mm:s3cret@127.0.0.1:5432/postgres?sslmode=bogus",
		"mysql://mm:s3cret@host/db",
	} {
		s, err := OpenPostgres(ctx, url, 0)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", url)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "store.url: ") || strings.Contains(msg, "s3cret") || strings.ContainsAny(msg, "\r\n") {
			t.Errorf("%s: %q", url, msg)
		}
		t.Log(err)
	}
}

// TestPGLostAnswer: a save whose answer was lost after it committed does
// not fence its own writer (the row names it as the holder), but still
// fences every other.
func TestPGLostAnswer(t *testing.T) {
	b := openPGBackend(t, 0)
	s := b.Backend.(*PGStore)
	ctx := context.Background()
	f := at("20260916-101530-lost", "/w", 0, "hello")
	if err := s.Create(ctx, f.Cwd, f.ID, mustMarshal(t, f)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, f.Cwd, f.ID, mustMarshal(t, f)); !errors.Is(err, ErrFenced) {
		t.Errorf("creating a taken id: %v", err)
	}
	mine := &pgSaver{s: s, id: f.ID, rev: 1, holder: "mine"}
	other := &pgSaver{s: s, id: f.ID, rev: 1, holder: "other"}
	data := mustMarshal(t, f)
	if err := mine.save(data); err != nil {
		t.Fatal(err)
	}
	mine.rev-- // as if the answer of that save had been lost
	if err := mine.save(data); err != nil || mine.rev != 3 {
		t.Errorf("after a lost answer: %v, rev %d", err, mine.rev)
	}
	if err := other.save(data); !errors.Is(err, ErrFenced) {
		t.Errorf("another writer at the old version: %v", err)
	}
	mine.rev = 1 // far behind: someone else's saves, as far as it can tell
	if err := mine.save(data); !errors.Is(err, ErrFenced) {
		t.Errorf("a writer two versions behind: %v", err)
	}
}
