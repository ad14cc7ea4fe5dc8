package integration

import (
	"context"
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
