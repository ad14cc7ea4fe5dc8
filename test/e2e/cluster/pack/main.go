// Command pack puts one static binary into a FROM-scratch image (the same
// layer sluice's own image has: the binary, a non-root passwd entry, the CA
// bundle, /tmp) and writes it as a tarball that `ctr images import` reads.
// The real-cluster tests pack nats-server, versitygw, CoreDNS, Traefik,
// Knative's components and a pause program with it, tagged dev.local/...
// so that Knative never asks a registry for a digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-project/sluice/internal/ociimage"
)

func main() {
	binary := flag.String("binary", "", "the static binary")
	tag := flag.String("tag", "", "the image's reference, e.g. dev.local/nats-server:v2.15.2")
	out := flag.String("out", "", "the tarball to write")
	entrypoint := flag.String("entrypoint", "", "the entrypoint's arguments after the binary, space-separated")
	flag.Parse()
	if *binary == "" || *tag == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "pack: --binary, --tag and --out are required")
		os.Exit(2)
	}
	path := "/" + filepath.Base(*binary)
	img, err := ociimage.Image(ociimage.Options{
		Binary: *binary, Path: path, Title: filepath.Base(*binary),
		Entrypoint: append([]string{path}, strings.Fields(*entrypoint)...),
	})
	if err == nil {
		err = ociimage.WriteTarball(*out, *tag, img)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
}
