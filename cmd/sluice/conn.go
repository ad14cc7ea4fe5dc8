package main

import (
	"github.com/sluice-project/sluice/internal/connect"
)

// resolve is a parse check that merges the connection settings (flags,
// SLUICE_* environment, config file) into *out; its error holds every
// problem, one per line, which parse prints each on its own.
func resolve(f *connect.Flags, out *connect.Config) func() error {
	return func() error {
		c, err := f.Resolve()
		*out = c
		return err
	}
}
