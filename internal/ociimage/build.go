package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
)

// StaticTags are the build tags of the image's binary: libjpeg-turbo for
// decoding, and Go's own DNS resolver and user lookup so that no glibc
// NSS module is needed at run time.
const StaticTags = "turbojpeg netgo osusergo"

// BuildStatic compiles ./cmd/sluice of the module at root into out, linked
// statically (libjpeg-turbo's static library, Debian's libjpeg62-turbo-dev,
// and glibc's). version is stamped into `sluice version`.
func BuildStatic(ctx context.Context, root, out, version string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", StaticTags, "-trimpath",
		"-ldflags", fmt.Sprintf(`-s -w -X main.version=%s -linkmode external -extldflags "-static"`, version),
		"-o", out, "./cmd/sluice")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building a static sluice: %w\n%s", err, stderr.String())
	}
	// go-nvml's dlopen draws a linker warning in a static binary; NVML is
	// the trainer agent's, never loaded by `fn serve`, so it is harmless.
	return nil
}
