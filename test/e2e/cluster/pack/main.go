// Command pack puts one static binary into a FROM-scratch image (the same
// layer sluice's own image has: the binary, a non-root passwd entry, the CA
// bundle, /tmp) and writes it as a tarball that `ctr images import` reads.
// The real-cluster tests pack nats-server, versitygw, CoreDNS, Traefik,
// Knative's components and a pause program with it, tagged dev.local/...
// so that Knative never asks a registry for a digest. With --layer (and no
// --binary) it packs a program that is not one binary, such as the
// trainer pods' Python, from layer tarballs on top of that base.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluice-project/sluice/internal/ociimage"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	binary := flag.String("binary", "", "the static binary")
	tag := flag.String("tag", "", "the image's reference, e.g. dev.local/nats-server:v2.15.2")
	out := flag.String("out", "", "the tarball to write")
	entrypoint := flag.String("entrypoint", "", "the entrypoint's arguments after the binary, space-separated; with --layer and no --binary, the whole entrypoint")
	var layers, env list
	flag.Var(&layers, "layer", "a `TAR` to add as a layer on top of the base (repeatable, bottom first)")
	flag.Var(&env, "env", "a `NAME=VALUE` for the image's environment (repeatable)")
	flag.Parse()
	if (*binary == "" && len(layers) == 0) || *tag == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "pack: --binary (or --layer), --tag and --out are required")
		os.Exit(2)
	}
	if err := pack(*binary, *tag, *out, strings.Fields(*entrypoint), layers, env); err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
}

func pack(binary, tag, out string, entrypoint, layerTars, env []string) error {
	o := ociimage.Options{Binary: binary, Env: env}
	if binary != "" {
		o.Path = "/" + filepath.Base(binary)
		o.Title = filepath.Base(binary)
		o.Entrypoint = append([]string{o.Path}, entrypoint...)
	} else {
		if len(entrypoint) == 0 {
			return fmt.Errorf("--layer without --binary: --entrypoint is required")
		}
		o.Path, o.Title, o.Entrypoint = entrypoint[0], filepath.Base(tag), entrypoint
	}
	for _, p := range layerTars {
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", p, err)
		}
		o.Layers = append(o.Layers, v1.Layer(l))
	}
	img, err := ociimage.Image(o)
	if err != nil {
		return err
	}
	return ociimage.WriteTarball(out, tag, img)
}
