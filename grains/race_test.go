//go:build race

package grains

// raceBuild says the tests run with the race detector.
const raceBuild = true
