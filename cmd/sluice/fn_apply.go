package main

import (
	"context"
	"errors"
	"io"
)

// runFnApply is written in issue 3's pipeline work.
func runFnApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not built yet")
}
