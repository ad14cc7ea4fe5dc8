// Command image (deploy/image) builds Sluice's container image without a Docker
// daemon (`make image`): a statically linked sluice with libjpeg-turbo,
// run as a non-root user, entrypoint `sluice fn serve`. It writes an OCI
// image layout (OUT/oci) and a tarball for `docker load` (OUT/sluice.tar),
// and prints the image's digest. Push the layout with any OCI tool, e.g.
// `skopeo copy oci:OUT/oci docker://REGISTRY/sluice:TAG` or
// `crane push OUT/oci REGISTRY/sluice:TAG`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sluice-project/sluice/internal/ociimage"
)

func main() {
	out := flag.String("out", "bin/image", "output `dir`: oci/ (an OCI image layout) and sluice.tar (docker load)")
	tag := flag.String("tag", "sluice:dev", "the image's name in the tarball and the layout's index")
	version := flag.String("version", "dev", "version stamped into `sluice version` and the image's label")
	binary := flag.String("binary", "", "a static sluice to put in instead of building one")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *out, *tag, *version, *binary); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, tag, version, binary string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if binary == "" {
		binary = filepath.Join(out, "sluice")
		fmt.Fprintf(os.Stderr, "building a static sluice (tags %q) into %s\n", ociimage.StaticTags, binary)
		if err := ociimage.BuildStatic(ctx, ".", binary, version); err != nil {
			return err
		}
	}
	img, err := ociimage.Image(ociimage.Options{Binary: binary, Version: version})
	if err != nil {
		return err
	}
	if err := ociimage.WriteLayout(filepath.Join(out, "oci"), tag, img); err != nil {
		return err
	}
	if err := ociimage.WriteTarball(filepath.Join(out, "sluice.tar"), tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", tag, digest)
	fmt.Fprintf(os.Stderr, "wrote %s (OCI layout) and %s (docker load)\n", filepath.Join(out, "oci"), filepath.Join(out, "sluice.tar"))
	return nil
}
