//go:build !unix

package lsptest

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
