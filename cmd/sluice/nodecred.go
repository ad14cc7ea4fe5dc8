package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sluice-project/sluice/wire"
)

// runJobNodeCredential writes a node's credential, derived from the job's
// team key (wire.DeriveNode): the one file that node's agent needs. It
// connects to nothing: the derivation is the key's alone.
func runJobNodeCredential(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job node-credential", stderr)
	node := fs.String("node", "", "the node's `NAME`: its agent's --name (required; 1-128 characters of [A-Za-z0-9._-])")
	keyFile := fs.String("team-key-file", "", "`FILE` holding the job's team key (default: $"+wire.TeamKeyFileEnv+", else the job's file in $"+wire.TeamKeyDirEnv+" or the user's config directory)")
	out := fs.String("out", "", "`FILE` to write the credential to, readable by you only (default: JOB.NODE.nodecred beside the job's team key file)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job node-credential ID --node NAME [--team-key-file FILE] [--out FILE]\n\n"+
			"Derives node NAME's credential from job ID's team key and writes it to a file readable by\n"+
			"you only: give it to that node's agent (--node-credential-file or $"+wire.NodeCredentialFileEnv+") instead\n"+
			"of the team key. The agent connects to NATS as the job with it and seals its team messages,\n"+
			"demand signals and reader records as NAME; it cannot act as another node, nor derive another\n"+
			"node's credential. The team key stays with you.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a job id", func() error {
		if *node == "" {
			return errors.New("--node: required")
		}
		return wire.ValidateNodeName(*node)
	})
	if err != nil {
		return err
	}
	job := pos[0]
	if err := wire.ValidateJobID(job); err != nil {
		return err
	}
	keyPath := *keyFile
	if keyPath == "" {
		keyPath = os.Getenv(wire.TeamKeyFileEnv)
	}
	if keyPath == "" {
		dir, err := teamKeyDir()
		if err != nil {
			return fmt.Errorf("--team-key-file: %w", err)
		}
		keyPath = wire.TeamKeyPath(dir, job)
	}
	data, err := os.ReadFile(keyPath)
	if err != nil {
		return fmt.Errorf("reading job %s's team key, which `sluice job submit` wrote: %w", job, err)
	}
	key, err := wire.ParseTeamKey(data)
	if err != nil {
		return fmt.Errorf("%s: %w", keyPath, err)
	}
	id, err := wire.DeriveNode(key, job, *node)
	if err != nil {
		return err
	}
	path := *out
	if path == "" {
		path = filepath.Join(filepath.Dir(keyPath), job+"."+*node+".nodecred")
	}
	if err := writeSecretFile(path, id.Encode()); err != nil {
		return fmt.Errorf("writing the node credential: %w", err)
	}
	fmt.Fprintf(stdout, "node %s of job %s: credential written to %s (readable by you only); its agent takes it with --node-credential-file or $%s\n",
		*node, job, path, wire.NodeCredentialFileEnv)
	return nil
}

// writeSecretFile writes data to path, readable by its owner only (a
// file there before is replaced, whatever its mode was).
func writeSecretFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
	}
	return werr
}

// credentialModeErr says why a credential file of mode perm, owned by
// uid, is refused: anyone may read it, or anyone but its owner may unless
// the owner is root and the group may only read (0440, 0640: a Kubernetes
// Secret volume with the pod's fsGroup, which the kubelet makes
// group-readable; PostgreSQL allows its key files the same).
func credentialModeErr(perm fs.FileMode, uid uint32) error {
	switch {
	case perm&0o007 != 0:
		return fmt.Errorf("is readable by anyone (mode %04o): a node credential lets its holder act as the node; chmod 600 it", perm)
	case perm&0o070 != 0 && (uid != 0 || perm&0o030 != 0):
		return fmt.Errorf("is readable by others (mode %04o, owner uid %d): a node credential lets its holder act as the node; chmod 600 it "+
			"(group read is allowed on a file root owns, as a Kubernetes Secret volume's)", perm, uid)
	}
	return nil
}

// loadNodeCredential reads a node credential file: one others can read is
// refused (it lets its holder act as the node). Its errors never quote
// the file's secrets.
func loadNodeCredential(path string) (*wire.NodeIdentity, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	uid := uint32(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		uid = sys.Uid
	}
	if err := credentialModeErr(st.Mode().Perm(), uid); err != nil {
		return nil, fmt.Errorf("%s %w", path, err)
	}
	if st.Size() > 64<<10 {
		return nil, fmt.Errorf("%s: %d bytes: not a node credential", path, st.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	id, err := wire.ParseNodeCredential(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}
