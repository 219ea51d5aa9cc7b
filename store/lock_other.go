//go:build !unix

package store

// lockFile takes no lock between processes where flock is missing: one
// mm process at a time uses a state folder there (its own lock, a mutex,
// still orders its goroutines).
func lockFile(string) (func(), error) { return func() {}, nil }
