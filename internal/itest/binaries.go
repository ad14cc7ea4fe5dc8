package itest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Binaries are the programs a scenario runs.
type Binaries struct {
	Sluice     string
	NATSServer string
	VersityGW  string
}

// VersityGWVersion is the versitygw release .ci/deps.sh installs.
const VersityGWVersion = "v1.8.0"

// VersityGWHint says how to get versitygw when it is missing.
const VersityGWHint = "versitygw not found in .bin/ or PATH: run `bash .ci/deps.sh` (GOBIN=<repo>/.bin go install github.com/versity/versitygw/cmd/versitygw@" + VersityGWVersion + ")"

// ErrNoVersityGW means versitygw is neither in <repo>/.bin nor in PATH.
var ErrNoVersityGW = errors.New(VersityGWHint)

// ModuleRoot walks up from the working directory to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// BuildSluice builds ./cmd/sluice of the module at root into dir.
func BuildSluice(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "sluice")
	if err := goCmd(ctx, root, "build", "-o", out, "./cmd/sluice"); err != nil {
		return "", err
	}
	return out, nil
}

// NATSServerBinary builds the nats-server of the version go.mod requires
// into <root>/.bin/nats-server-<version>, once per machine.
func NATSServerBinary(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	v, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the nats-server version in go.mod: %w", err)
	}
	out := filepath.Join(root, ".bin", "nats-server-"+strings.TrimSpace(string(v)))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// Build beside the target and rename, so that a build cut short never
	// leaves a broken binary behind the version's name.
	tmp := out + ".tmp"
	if err := goCmd(ctx, root, "build", "-o", tmp, "github.com/nats-io/nats-server/v2"); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// FindVersityGW looks in <root>/.bin, then PATH.
func FindVersityGW(root string) (string, error) {
	p := filepath.Join(root, ".bin", "versitygw")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", ErrNoVersityGW
}

func goCmd(ctx context.Context, root string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
