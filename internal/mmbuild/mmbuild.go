// Package mmbuild builds the programs that tests run as real processes (mm,
// mmstress, test servers), so that `go test ./...` compiles each of them as
// cheaply as it can.
//
// go test runs several packages' test binaries at once, and each that starts
// mm builds it in its TestMain. Two `go build`s of the same program at the
// same moment both compile everything the build cache lacks: on a new
// machine, whose cache is empty, that is the whole module graph twice. Build
// holds a lock file while it builds, so that the second waits for the first
// and then finds every package in the cache.
//
// Build may be called from any goroutine or process.
package mmbuild

import (
	"fmt"
	"os/exec"
)

// Build builds the Go package pkg (an import path or a directory) into
// out, with the extra go build flags given (e.g. "-race").
func Build(out, pkg string, flags ...string) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	args := append([]string{"build", "-o", out}, flags...)
	args = append(args, pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, b)
	}
	return nil
}
