package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts; tests and deploy/knative rely on them.
const (
	BinaryPath = "/sluice"
	UID        = 65532 // "nonroot", as in distroless images
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
	Port       = 8080 // what `fn serve` listens on when Knative sets none
)

// Entrypoint runs the function server; `args` in a Knative Service add flags.
var Entrypoint = []string{BinaryPath, "fn", "serve"}

// Options describe the image.
type Options struct {
	// Binary is the static sluice to put in; CACerts the PEM bundle to
	// trust (default /etc/ssl/certs/ca-certificates.crt of this machine).
	Binary, CACerts string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Created is every timestamp in the image (zero: the Unix epoch), so
	// that the same inputs give the same digest.
	Created time.Time
	// Arch is the binary's architecture (default amd64).
	Arch string
	// Path, Entrypoint and Title describe another program than sluice
	// (the real-cluster tests pack nats-server, Knative's components and
	// the like the same way); empty, they are sluice's.
	Path       string
	Entrypoint []string
	Title      string
	// Layers go on top of the base layer: a runtime and a program that
	// are not one static binary (the real-cluster tests' Python trainer).
	// With Layers, Binary may be empty: the base layer then holds no
	// program.
	Layers []v1.Layer
	// Env adds variables to the config's, replacing those of the same
	// name (PATH for such a runtime).
	Env []string
}

// Image assembles the image from o.
func Image(o Options) (v1.Image, error) {
	if o.CACerts == "" {
		o.CACerts = CAPath
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	title, description := "sluice", "Sluice preprocessing function server (sluice fn serve)"
	if o.Path == "" {
		o.Path, o.Entrypoint = BinaryPath, Entrypoint
	} else {
		title, description = o.Title, o.Title
		if len(o.Entrypoint) == 0 {
			o.Entrypoint = []string{o.Path}
		}
	}
	var bin []byte
	if o.Binary != "" || len(o.Layers) == 0 {
		b, err := os.ReadFile(o.Binary)
		if err != nil {
			return nil, fmt.Errorf("reading the binary: %w", err)
		}
		bin = b
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	layerTar, err := rootfs(strings.TrimPrefix(o.Path, "/"), bin, ca, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer, History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "sluice-image: static " + title + ", passwd, CA bundle"},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	for i, l := range o.Layers {
		img, err = mutate.AppendLayers(img, l)
		if err != nil {
			return nil, fmt.Errorf("adding layer %d: %w", i+1, err)
		}
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	uid := strconv.Itoa(UID)
	cf.Config = v1.Config{
		Entrypoint:   o.Entrypoint,
		User:         uid + ":" + uid,
		WorkingDir:   "/",
		Env:          mergeEnv([]string{"PATH=/", "SSL_CERT_FILE=" + CAPath, "PORT=" + strconv.Itoa(Port)}, o.Env),
		ExposedPorts: map[string]struct{}{strconv.Itoa(Port) + "/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       title,
			"org.opencontainers.image.description": description,
			"org.opencontainers.image.version":     o.Version,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return img, nil
}

// mergeEnv is base with extra's variables, each replacing base's of the
// same name.
func mergeEnv(base, extra []string) []string {
	out := slices.Clone(base)
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(b string) bool { return strings.HasPrefix(b, name+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// rootfs is the layer's tar: the binary at path, passwd and group with the
// non-root user, the CA bundle, and /tmp.
func rootfs(path string, bin, ca []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	uid := strconv.Itoa(UID)
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + uid + ":nonroot:/tmp:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:" + uid + ":\n"
	steps := []func() error{
		func() error {
			if bin == nil {
				return nil
			}
			return file(path, 0o755, bin)
		},
		func() error { return dir("etc/", 0o755) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("etc/ssl/", 0o755) },
		func() error { return dir("etc/ssl/certs/", 0o755) },
		func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, ca) },
		func() error { return dir("tmp/", 0o1777) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("writing the layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}
