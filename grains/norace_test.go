//go:build !race

package grains

const raceBuild = false
