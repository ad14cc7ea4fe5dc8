package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// errUsage means the flags were wrong and the message is already printed.
var errUsage = errors.New("usage")

// newFlagSet prints usage errors itself and returns errUsage through parse.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args, then runs checks; each failing check prints one line
// naming the flag and its allowed range, and all are printed at once.
func parse(fs *flag.FlagSet, args []string, checks ...func() error) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	bad := false
	for _, c := range checks {
		err := c()
		if err == nil {
			continue
		}
		bad = true
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap() // several problems (errors.Join): one line each
		}
		for _, e := range errs {
			fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), e)
		}
	}
	if bad {
		return errUsage
	}
	return nil
}

func intRange(name string, v *int, lo, hi int) func() error {
	return func() error {
		if *v < lo || *v > hi {
			return fmt.Errorf("--%s %d: want %d..%d", name, *v, lo, hi)
		}
		return nil
	}
}

func durationRange(name string, v *time.Duration, lo, hi time.Duration) func() error {
	return func() error {
		if *v < lo || *v > hi {
			return fmt.Errorf("--%s %v: want %v..%v", name, *v, lo, hi)
		}
		return nil
	}
}

func oneOf(name string, v *string, allowed ...string) func() error {
	return func() error {
		for _, a := range allowed {
			if *v == a {
				return nil
			}
		}
		return fmt.Errorf("--%s %q: want one of %s", name, *v, strings.Join(allowed, ", "))
	}
}

// logLevels are the accepted --log-level values.
var logLevels = []string{"debug", "info", "warn", "error"}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by oneOf
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
