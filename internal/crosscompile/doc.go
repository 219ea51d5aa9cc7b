// Package crosscompile holds one test: mm builds for every system it
// supports. It is a package of its own so that, with a cold build cache,
// its minutes of compiling run beside the other packages' tests and count
// against a timeout of their own.
package crosscompile
