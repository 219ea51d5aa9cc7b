//go:build race

package protocol_test

// raceBuild is true when the race detector is on: it makes the HTML parser
// about ten times slower, too slow for the pages that cost it the most.
const raceBuild = true
