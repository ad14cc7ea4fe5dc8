// Package ociimage builds Sluice's container image without a Docker
// daemon, with go-containerregistry as a library: one layer holding a
// statically linked `sluice` (the turbojpeg build, libjpeg-turbo linked
// in), a passwd entry for the non-root user it runs as, the CA bundle for
// S3 over TLS and an empty /tmp; entrypoint `sluice fn serve`. Nothing else
// is in the image: no shell, no libc, no package manager.
//
// BuildStatic compiles the binary, Image assembles the image, and
// WriteLayout and WriteTarball write it as an OCI image layout (for
// skopeo, crane, podman, containerd's `ctr import`) or a tarball that
// `docker load` reads. The image is reproducible: every timestamp is
// Options.Created.
package ociimage
