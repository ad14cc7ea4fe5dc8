package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/imagejob"
	"github.com/sluice-project/sluice/wire"
)

// files reads the image's flattened filesystem: path -> header, and the
// content of regular files.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "/")
		hdrs[name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			data[name] = b
		}
	}
}

func fakeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice")
	if err := os.WriteFile(p, []byte("not really sluice"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImageConfigAndFiles(t *testing.T) {
	img, err := Image(Options{Binary: fakeBinary(t), Version: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q, %v; want OCI", mt, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"/sluice", "fn", "serve"}, cf.Config.Entrypoint); d != "" {
		t.Errorf("entrypoint (-want,+got)\n%s", d)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want the non-root 65532:65532", cf.Config.User)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("cmd %q, want none (flags come from the Service's args)", cf.Config.Cmd)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if _, ok := cf.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v, want 8080/tcp", cf.Config.ExposedPorts)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("labels %v", cf.Config.Labels)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Errorf("%d layers, want 1", len(layers))
	}

	hdrs, data := files(t, img)
	var names []string
	for n := range hdrs {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"/etc", "/etc/group", "/etc/passwd", "/etc/ssl", "/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt", "/sluice", "/tmp"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("files (-want,+got)\n%s", d)
	}
	if h := hdrs["/sluice"]; h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Errorf("/sluice mode %o uid %d: want executable, owned by root (not writable by the user)", h.Mode, h.Uid)
	}
	if h := hdrs["/tmp"]; h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", h.Mode)
	}
	if !strings.Contains(string(data["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the user:\n%s", data["/etc/passwd"])
	}
	if !strings.Contains(string(data["/etc/ssl/certs/ca-certificates.crt"]), "BEGIN CERTIFICATE") {
		t.Error("no CA bundle")
	}
}

// TestImageLayers: a program that is not one static binary (a Python
// trainer) comes in Layers on top of the base layer, which then holds no
// program, and Env replaces the default PATH.
func TestImageLayers(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, data string }{{"usr/bin/python3", "#!python"}, {"opt/train.py", "print(1)"}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o755, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(Options{Path: "/usr/bin/python3", Entrypoint: []string{"/usr/bin/python3", "/opt/train.py"}, Title: "trainer",
		Layers: []v1.Layer{layer}, Env: []string{"PATH=/usr/bin:/bin", "PYTHONUNBUFFERED=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if layers, _ := img.Layers(); len(layers) != 2 {
		t.Errorf("%d layers, want 2", len(layers))
	}
	hdrs, data := files(t, img)
	if _, ok := hdrs["/sluice"]; ok {
		t.Error("/sluice in an image of another program")
	}
	if string(data["/opt/train.py"]) != "print(1)" || hdrs["/etc/passwd"] == nil {
		t.Errorf("files %v: want the layer's and the base layer's", slices.Sorted(maps.Keys(hdrs)))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath, "PORT=8080", "PYTHONUNBUFFERED=1"}
	if d := cmp.Diff(want, cf.Config.Env); d != "" {
		t.Errorf("env (-want,+got)\n%s", d)
	}
	if _, err := Image(Options{Path: "/x", Title: "x"}); err == nil {
		t.Error("an image of no binary and no layers: no error")
	}
}

func TestImageIsReproducibleAndRoundTrips(t *testing.T) {
	bin := fakeBinary(t)
	a, err := Image(Options{Binary: bin, Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Image(Options{Binary: bin, Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("same inputs, digests %s and %s", da, db)
	}
	dir := t.TempDir()
	if err := WriteLayout(filepath.Join(dir, "oci"), "sluice:test", a); err != nil {
		t.Fatal(err)
	}
	back, err := ReadLayout(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := back.Digest(); d != da {
		t.Errorf("layout round trip: digest %s, want %s", d, da)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "oci", "index.json"))
	var index v1.IndexManifest
	if err == nil {
		err = json.Unmarshal(idx, &index)
	}
	if err != nil || len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "sluice:test" {
		t.Errorf("index.json %s, %v: want the tag annotation", idx, err)
	}
	tarPath := filepath.Join(dir, "sluice.tar")
	if err := WriteTarball(tarPath, "sluice:test", a); err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := fromTar.ConfigFile()
	if err != nil || cf.Config.User != "65532:65532" {
		t.Errorf("tarball config %+v, %v", cf, err)
	}
}

// TestIntegrationImageBinaryRuns builds the real image (a static sluice
// with libjpeg-turbo), takes the binary out of its layer, checks it is
// statically linked, and runs it as the image's user: `sluice version`,
// then `fn serve` processing one shard end to end (S3 on loopback; the
// shard's output comes back as a frame stream in the response).
func TestIntegrationImageBinaryRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a static sluice: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	start := time.Now()
	if err := BuildStatic(ctx, root, filepath.Join(work, "build", "sluice"), "v0.0.0-test"); err != nil {
		t.Fatal(err)
	}
	t.Logf("static build: %v", time.Since(start).Round(time.Second))
	img, err := Image(Options{Binary: filepath.Join(work, "build", "sluice"), Version: "v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(filepath.Join(work, "oci"), "sluice:test", img); err != nil {
		t.Fatal(err)
	}
	img, err = ReadLayout(filepath.Join(work, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	_, data := files(t, img)

	// A directory the image's user can reach, as in the container.
	// (t.TempDir's parent is private to root).
	rootfs, err := os.MkdirTemp("", "sluice-image-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rootfs) })
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(rootfs, "sluice")
	if err := os.WriteFile(bin, data["/sluice"], 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: not statically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) != 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	f.Close()

	asUser := func(cmd *exec.Cmd) {
		cmd.Dir = rootfs
		if os.Getuid() == 0 { // run as the image's user, as the container would
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: UID, Gid: UID}}
		}
	}
	cmd := exec.CommandContext(ctx, bin, "version")
	asUser(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "v0.0.0-test" {
		t.Fatalf("sluice version: %q, %v", out, err)
	}

	// One shard through `fn serve`, started with the image's entrypoint.
	job := imagejob.New(ctx, t, imagejob.Options{ID: "img", Samples: 20, MinSide: 64, MaxSide: 128})
	serve := exec.CommandContext(ctx, bin, cf.Config.Entrypoint[1:]...)
	asUser(serve)
	serve.Env = append([]string{"HOME=/tmp"}, testenv.S3Env()...) // nothing of this machine's environment
	url := job.Serve(t, serve)
	defer func() { serve.Process.Signal(syscall.SIGTERM); serve.Wait() }()
	end, chunks, bytes, err := sendShard(ctx, url, job.Task)
	if err != nil || end.Samples != 20 || end.FailedCount() != 0 || end.Chunks == 0 || end.Chunks != chunks || end.Bytes != bytes {
		t.Fatalf("shard through the image's fn serve: %+v (%d chunks, %d bytes received), %v; want 20 samples in the chunks the end announces", end, chunks, bytes, err)
	}
	t.Logf("image binary: %d MiB; shard: %d samples in %d chunks (%d bytes)", len(data["/sluice"])>>20, end.Samples, end.Chunks, end.Bytes)
}

// sendShard POSTs task to a replica as an agent does and reads the frame
// stream of its reply: the shard's end, with the chunks and chunk bytes
// received before it.
func sendShard(ctx context.Context, url string, task wire.ShardTask) (end wire.ShardEnd, chunks int, bytes int64, err error) {
	end, err = dispatch.Sender{}.Send(ctx, url, task, func(_ int, data []byte) {
		chunks++
		bytes += int64(len(data))
	})
	return end, chunks, bytes, err
}
