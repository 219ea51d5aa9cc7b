//go:build !linux

package sandbox

import "errors"

// Network is a session's own network: Linux's.
type Network struct{}

// NewNetwork is a session's own network, which only Linux has.
func NewNetwork(*Ident) *Network { return &Network{} }

func (n *Network) ensure() (int, string, error) {
	return 0, "", errors.New("a session's own network needs Linux")
}

// Close does nothing here.
func (n *Network) Close() {}

func nsenterPath() string { return "" }

// CheckNetwork says that a network of their own for commands needs Linux.
func (s *Sandbox) CheckNetwork(_ *Ident, on bool) error {
	if !on {
		return nil
	}
	return errors.New("a network of their own for commands needs Linux")
}

// Protect does nothing here.
func Protect() {}
