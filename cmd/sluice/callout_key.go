package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nkeys"
)

// runNATSCalloutKey is `sluice nats callout-key`: a new account nkey for
// the NATS server's auth callout, its seed written to a file only its
// owner reads (the controller's, a Secret), its public key printed (the
// server's configuration, nats.conf's issuer). The seed never reaches
// stdout, argv or a log.
func runNATSCalloutKey(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("nats callout-key", stderr)
	seedFile := fs.String("seed-file", "", "`FILE` to write the new seed to (created, readable by you only; an existing file is not replaced)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice nats callout-key --seed-file FILE\n\n"+
			"Makes the key pair of the NATS auth callout through which controllers let each job's agents in:\n"+
			"writes its seed to FILE (for `sluice controller --nats-callout-seed-file`, the Secret's callout-seed)\n"+
			"and prints its public key (nats.conf's issuer, $SLUICE_NATS_CALLOUT_ISSUER, the Secret's callout-issuer).\n\n")
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, 0, "no arguments", func() error {
		if *seedFile == "" {
			return errors.New("--seed-file: required")
		}
		return nil
	}); err != nil {
		return err
	}
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return fmt.Errorf("making an account key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("making an account key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("making an account key: %w", err)
	}
	f, err := os.OpenFile(*seedFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--seed-file: %w", err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("--seed-file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--seed-file: %w", err)
	}
	fmt.Fprintln(stdout, pub)
	return nil
}
