package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/sluice-project/sluice/functions/pipeline"
)

// loadPipelineFlag resolves a --pipeline value, the one way every command
// does: a built-in name, else a spec file (a pipe such as /dev/stdin or
// <(...) too), else an inline YAML or JSON spec. doc is the spec's text,
// empty for a built-in; a job carries the name or doc.
func loadPipelineFlag(value string, o pipeline.Options) (p pipeline.Pipeline, doc string, err error) {
	if slices.Contains(pipeline.Names(), value) {
		p, err = pipeline.Lookup(value, o)
		return p, "", err
	}
	b, readErr := readSpecFile(value)
	if readErr == nil {
		p, err := pipeline.Parse(b, o)
		if err != nil {
			return nil, "", fmt.Errorf("--pipeline %s: %w", value, err)
		}
		return p, string(b), nil
	}
	if strings.ContainsAny(value, ":{\n") {
		p, err = pipeline.Lookup(value, o) // an inline spec
		if err != nil {
			return nil, "", fmt.Errorf("--pipeline: %w", err)
		}
		return p, value, nil
	}
	return nil, "", fmt.Errorf("--pipeline %q is neither a built-in pipeline (%s) nor a readable spec file (%v)",
		value, strings.Join(pipeline.Names(), ", "), readErr)
}

// readSpecFile reads a spec file or pipe; its error says why in a few
// words ("no such file or directory", "is a directory").
func readSpecFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, bareErr(err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.IsDir() {
		return nil, errors.New("is a directory")
	}
	// One byte over the cap is enough for pipeline.Parse to refuse it,
	// naming the cap.
	b, err := io.ReadAll(io.LimitReader(f, pipeline.MaxSpecBytes+1))
	if err != nil {
		return nil, bareErr(err)
	}
	return b, nil
}

// bareErr drops the operation and path a *fs.PathError repeats.
func bareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
