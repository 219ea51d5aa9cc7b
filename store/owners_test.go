package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mm-agent/mm/internal/testwait"
)

// TestClaimFolders: on each backend, the first owner of a folder keeps it:
// another cannot claim it, a folder inside it, or one that holds it (nor
// have it checked, as a shared folder is); its owner claims inside it
// without a new record; a claim is all or nothing; folders side by side
// (p1, p10) do not touch; FoldersNotOf lists the others' folders.
func TestClaimFolders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *testBackend) {
		ctx := testwait.Context(t)
		claim := func(owner string, folders ...string) error { return b.ClaimFolders(ctx, owner, folders, nil) }
		taken := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrFolderTaken) {
				t.Errorf("%s: %v, want ErrFolderTaken", what, err)
			} else if strings.Contains(err.Error(), "alice") {
				t.Errorf("%s: the error names the owner: %v", what, err)
			}
		}
		if err := claim("alice", "/w/p1"); err != nil {
			t.Fatal(err)
		}
		if err := claim("alice", "/w/p1"); err != nil {
			t.Errorf("alice's folder again: %v", err)
		}
		taken("bob in alice's folder", claim("bob", "/w/p1"))
		taken("bob inside alice's folder", claim("bob", "/w/p1/sub"))
		taken("bob in a folder that holds alice's", claim("bob", "/w"))
		taken("bob in the root", claim("bob", "/"))
		taken("bob's check of a folder inside alice's", b.ClaimFolders(ctx, "bob", nil, []string{"/w/p1/a"}))
		if err := claim("bob", "/w/p10"); err != nil {
			t.Errorf("bob beside alice's folder (p10 by p1): %v", err)
		}
		taken("a claim with one of alice's folders", claim("bob", "/w/p2", "/w/p1"))
		if err := claim("alice", "/w/p1/sub", "/w/p1/sub/deeper"); err != nil {
			t.Errorf("alice inside her folder: %v", err)
		}
		taken("alice in a folder that holds bob's", claim("alice", "/w"))
		if err := b.ClaimFolders(ctx, "bob", []string{"/w/p3"}, []string{"/w/shared"}); err != nil {
			t.Errorf("bob's claim with a shared folder checked: %v", err)
		}
		if err := claim("bob", "/w/p3/x", "/w/p3"); err != nil {
			t.Errorf("bob inside his folder, and it: %v", err)
		}
		for owner, want := range map[string][]string{"bob": {"/w/p1"}, "alice": {"/w/p10", "/w/p3"}, "carol": {"/w/p1", "/w/p10", "/w/p3"}} {
			if got, err := b.FoldersNotOf(ctx, owner); err != nil || !slices.Equal(got, want) {
				t.Errorf("FoldersNotOf(%s) = %v, %v; want %v (no record of /w/p2, /w/shared, nor of folders inside one's own)", owner, got, err, want)
			}
		}
		if err := claim("bob", "w/p4"); err == nil || errors.Is(err, ErrFolderTaken) {
			t.Errorf("a relative folder: %v", err)
		}
		if err := b.CheckOwners(ctx); err != nil {
			t.Errorf("CheckOwners: %v", err)
		}
	})
}

// TestClaimFoldersAtOnce: owners claim at once /w/p (the even ones) and
// each a folder of its own inside it (the odd ones): either one claim of
// /w/p succeeds and no other, or every claim inside it does and none of
// /w/p. In files the claims come from several Owners on one state folder,
// as from several mm processes, which only the file lock keeps apart.
func TestClaimFoldersAtOnce(t *testing.T) {
	const n = 8
	run := func(t *testing.T, claim func(owner, folder string) error) {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			folder := "/w/p"
			if i%2 == 1 {
				folder = fmt.Sprintf("/w/p/%d", i)
			}
			wg.Go(func() { errs[i] = claim(fmt.Sprint("owner", i), folder) })
		}
		wg.Wait()
		won := [2]int{}
		for i, err := range errs {
			switch {
			case err == nil:
				won[i%2]++
			case !errors.Is(err, ErrFolderTaken):
				t.Errorf("claim %d: %v", i, err)
			}
		}
		if won != [2]int{1, 0} && won != [2]int{0, n / 2} {
			t.Errorf("%d claims of /w/p and %d inside it succeeded: want one of /w/p alone, or every one inside it", won[0], won[1])
		}
		t.Logf("%d claims of /w/p and %d inside it succeeded", won[0], won[1])
	}
	t.Run("files", func(t *testing.T) {
		state := t.TempDir()
		run(t, func(owner, folder string) error { return OpenOwners(state).Claim(owner, []string{folder}, nil) })
	})
	t.Run("postgres", func(t *testing.T) {
		b := openPGBackend(t, 0)
		ctx := testwait.Context(t)
		run(t, func(owner, folder string) error { return b.ClaimFolders(ctx, owner, []string{folder}, nil) })
	})
}

// TestFolderOwnersLast: the record outlives the store that made it: a
// new file store on the same state folder (made by the first claim), a
// new connection to the same database, knows whose each folder is.
func TestFolderOwnersLast(t *testing.T) {
	ctx := testwait.Context(t)
	t.Run("files", func(t *testing.T) {
		// A state folder not made yet: the first claim makes it.
		state := filepath.Join(t.TempDir(), "state", "mm")
		first := NewFileStore(".mm/sessions", nil, nil, OpenOwners(state))
		if err := first.ClaimFolders(ctx, "alice", []string{"/w/p1"}, nil); err != nil {
			t.Fatal(err)
		}
		again := NewFileStore(".mm/sessions", nil, nil, OpenOwners(state))
		if err := again.ClaimFolders(ctx, "bob", []string{"/w/p1/x"}, nil); !errors.Is(err, ErrFolderTaken) {
			t.Errorf("bob inside alice's folder, on a new store: %v", err)
		}
		// A record read once is read again when another process changed
		// it (a store keeps what it read while the file is the same).
		if got, err := again.FoldersNotOf(ctx, "carol"); err != nil || !slices.Equal(got, []string{"/w/p1"}) {
			t.Fatalf("FoldersNotOf: %v, %v", got, err)
		}
		if err := OpenOwners(state).Claim("bob", []string{"/w/p2"}, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := again.FoldersNotOf(ctx, "carol"); err != nil || !slices.Equal(got, []string{"/w/p1", "/w/p2"}) {
			t.Errorf("FoldersNotOf after another process's claim: %v, %v", got, err)
		}
		// The store that wrote keeps what it wrote, and reads again once
		// another process wrote after it.
		if err := first.ClaimFolders(ctx, "alice", []string{"/w/p2/x"}, nil); !errors.Is(err, ErrFolderTaken) {
			t.Errorf("alice inside bob's folder, on the store that wrote before bob: %v", err)
		}
		b, err := os.ReadFile(filepath.Join(state, "owners.json"))
		if err != nil || !strings.Contains(string(b), `"/w/p1": "alice"`) {
			t.Errorf("owners.json: %s, %v", b, err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgURL(t)
		s, err := OpenPostgres(ctx, url, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimFolders(ctx, "alice", []string{"/w/p1"}, nil); err != nil {
			t.Fatal(err)
		}
		s.Close()
		again, err := OpenPostgres(ctx, url, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		if err := again.ClaimFolders(ctx, "bob", []string{"/w/p1/x"}, nil); !errors.Is(err, ErrFolderTaken) {
			t.Errorf("bob inside alice's folder, on a new connection: %v", err)
		}
	})
}

// TestFolderOwnersCorrupt: a record mm cannot read is an error that says
// where and why, every use of it fails, and it is never written over: a
// torn or hand-broken file, one with an entry that is not a folder, one
// a newer mm wrote (which says to upgrade).
func TestFolderOwnersCorrupt(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		text string
		want error
		says string
	}{
		"torn":         {`{"version": 1, "folders": {"/w/p1": `, ErrCorrupt, "corrupt"},
		"relative":     {`{"version": 1, "folders": {"w/p1": "alice"}}`, ErrCorrupt, `"w/p1"`},
		"no owner":     {`{"version": 1, "folders": {"/w/p1": ""}}`, ErrCorrupt, "no owner"},
		"no version":   {`{"folders": {}}`, ErrCorrupt, "version 0"},
		"unknown":      {`{"version": 1, "folders": {}, "extra": 1}`, ErrCorrupt, "extra"},
		"newer":        {`{"version": 2, "folders": {}}`, ErrVersion, "upgrade mm"},
		"not a record": {`[]`, ErrCorrupt, "corrupt"},
	} {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			path := filepath.Join(state, "owners.json")
			if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			s := NewFileStore(".mm/sessions", nil, nil, OpenOwners(state))
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s: %v, want %v naming %s and saying %q, on one line", what, err, c.want, path, c.says)
				}
			}
			check("CheckOwners", s.CheckOwners(ctx))
			check("ClaimFolders", s.ClaimFolders(ctx, "alice", []string{"/w/p2"}, nil))
			_, err := s.FoldersNotOf(ctx, "alice")
			check("FoldersNotOf", err)
			if b, _ := os.ReadFile(path); string(b) != c.text {
				t.Errorf("the record was changed: %q", b)
			}
		})
	}
}

// TestPGMigrateFolders: a database of schema version 1 (sessions only)
// gains mm_folders, its sessions kept.
func TestPGMigrateFolders(t *testing.T) {
	url := pgURL(t)
	ctx := testwait.Context(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Schema version 1, as an mm of before folders' owners made it.
	stmts := append([]string{`CREATE TABLE mm_schema (version integer NOT NULL)`, `INSERT INTO mm_schema (version) VALUES (1)`}, migrations[1]...)
	stmts = append(stmts, `INSERT INTO mm_sessions (id, cwd, owner, title, updated, format, version, holder, doc) VALUES ('s1', '/w', 'alice', 't', now(), 1, 1, '', '\x7b7d')`)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := OpenPostgres(ctx, url, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v, n int
	if err := s.pool.QueryRow(ctx, `SELECT max(version), (SELECT count(*) FROM mm_sessions) FROM mm_schema`).Scan(&v, &n); err != nil || v != schemaVersion || n != 1 {
		t.Errorf("after the migration: version %d, %d session(s), %v", v, n, err)
	}
	if err := s.ClaimFolders(ctx, "alice", []string{"/w"}, nil); err != nil {
		t.Errorf("a claim after the migration: %v", err)
	}
}
