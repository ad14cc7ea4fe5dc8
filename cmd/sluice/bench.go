package main

import (
	"context"
	"errors"
	"io"
)

// runBenchOps is written in issue 3's performance work.
func runBenchOps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not built yet")
}
