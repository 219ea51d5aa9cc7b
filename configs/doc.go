// Package configs owns mm's configuration.
//
// It owns:
//   - default.yaml, embedded with go:embed: the one source of truth for every
//     key, its default and, in its comments, its meaning (tests check that
//     every key has a comment and that docs/configuration.md lists it);
//   - Load, which layers the user's file on those defaults key by key: the
//     path given, else $MM_CONFIG, else ~/.config/mm/config.yaml (a default
//     location that does not exist is not an error). Parse does the same
//     for YAML text. An unknown key is an error naming the key and the file;
//   - validation (validate.go): the ranges, choices and required values the
//     types cannot express, checked once at load, each failure wrapping
//     ErrConfig;
//   - Bytes, a size written as a number or with a unit (512KiB, 64MiB);
//   - what the model reads that is mm's own: the system prompt (system.md,
//     and system-compact.md for small windows), the compaction request
//     (compact.md) and the note of a turn's last call (last-call.md); and,
//     beside the package, the commented example configs in configs/examples.
//
// Concurrency: Load and Parse build a new *Config on each call and may run
// from any goroutine. A loaded *Config is read-only: nothing changes it after
// Load returns, so one value is shared by every goroutine and actor of the
// process without locks. Default returns a fresh copy each time.
package configs
