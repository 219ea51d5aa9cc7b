//go:build !unix

package tools

import (
	"io/fs"
	"os"
)

// chownLike does nothing where files have no Unix owner.
func chownLike(*os.File, fs.FileInfo, string) error { return nil }

// mkdirOwned is os.MkdirAll.
func mkdirOwned(dir string) error { return os.MkdirAll(dir, 0o755) }
