// Package store persists mm sessions: by default to disk, one JSON file per
// session at <cwd>/<sessions.dir>/<id>.json (docs/session-format.md
// describes the format).
//
// It owns:
//   - the seam (backend.go): Backend, through which the session actor
//     saves (its Writer) and the ACP edge loads, lists and deletes, with
//     two implementations: the file store (filestore.go: FileStore, the
//     files below), the default, and Postgres (postgres.go: PGStore, for
//     store.url; its schema and migrations in pgschema.go), whose rows
//     hold the same documents and whose every save is fenced (ErrFenced);
//   - the file format (store.go): File and its version, Marshal, Unmarshal,
//     Load and the title rule, so that every reader and writer agrees on one
//     definition;
//   - atomic replacement (atomic.go): WriteAtomic, which guarantees that a
//     process killed at any moment leaves either the old or the new complete
//     file, never a torn one;
//   - listing (list.go): List, which reads only the header of each file so
//     that session/list stays fast however long the histories are;
//   - reading files anyone may have written (read.go): Reader, which opens
//     a session file without following a link or blocking, reads only
//     regular files of at most a limit, and checks its signature; a
//     session folder may come with a repository;
//   - signatures (sign.go): Key, the user's key in the state directory,
//     which signs what mm writes (Key.Marshal) so that a file mm did not
//     write for this user is told apart (File.Signed);
//   - background writing (writer.go): Writer, one per session, so that the
//     session actor never blocks on the disk, and that stops saving once
//     a save is fenced (ErrFenced);
//   - the folder index (folders.go): Folders, the folders that hold saved
//     sessions, in the user's state directory.
//
// WriteAtomic and List remove the stale temporary files a killed mm left
// in a sessions folder (internal/tempfile).
//
// Concurrency: a Writer is owned by one session actor, which queues encoded
// files with Save and closes it when the session ends. Save, Close and Done
// are safe to call from any goroutine. One session file is only ever written
// by its own Writer (or, before that Writer exists or for a file no Writer
// owns, by a single direct WriteAtomic call), so writes to one path never
// race; WriteAtomic also tolerates concurrent writers, since each writes its
// own temporary file and the last rename wins whole. Readers (Load, List) may
// run at any time, from any goroutine, because a file is only ever replaced
// by a rename and so is always seen complete. A Reader and a Key are safe
// for concurrent use; a Key reads or makes its file once, on first use.
// Backends are safe for concurrent use. In Postgres, a session may have
// Writers in several processes at once (two activations): each save is
// one fenced statement, so the first to save wins and the others fail
// with ErrFenced; a row is always seen whole.
package store
