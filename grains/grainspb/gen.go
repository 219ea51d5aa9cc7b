// Package grainspb holds the protobuf messages mm's nodes exchange.
package grainspb

//go:generate protoc --go_out=. --go_opt=paths=source_relative grains.proto
