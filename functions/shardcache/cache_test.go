package shardcache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
)

const bucket = "cache-test"

// env is a real S3 endpoint on loopback (gofakes3) with a bucket.
type env struct {
	t   *testing.T
	s3  *s3.Client
	cfg objstore.Config
}

func newEnv(t *testing.T) *env {
	c, cfg := testenv.S3(t, bucket)
	return &env{t: t, s3: c, cfg: cfg}
}

// newVersitygw is an env on versitygw, a real S3 gateway: its ETags, its
// HEAD and its overwrites are a server's, not a fake's.
func newVersitygw(t *testing.T) *env {
	const key, secret = "cache-key", "cache-secret"
	endpoint := testenv.Versitygw(t, key, secret)
	cfg := objstore.Config{Endpoint: endpoint, PathStyle: true, Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")}
	c, err := objstore.NewClient(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: ptr(bucket)}); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, s3: c, cfg: cfg}
}

// onServers runs f against each S3 server the tests have.
func onServers(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("gofakes3", func(t *testing.T) { f(t, newEnv(t)) })
	t.Run("versitygw", func(t *testing.T) { f(t, newVersitygw(t)) })
}

func (e *env) put(key string, data []byte) {
	e.t.Helper()
	if _, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: ptr(bucket), Key: &key, Body: bytes.NewReader(data)}); err != nil {
		e.t.Fatal(err)
	}
}

func ptr(s string) *string { return &s }

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newCache(t *testing.T, cfg Config, s3c ObjectAPI) (*Cache, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	c, err := New(cfg, s3c, slog.New(slog.NewTextHandler(logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, logs
}

// read reads key through c and says where it came from.
func read(t *testing.T, c *Cache, key string) ([]byte, Outcome) {
	t.Helper()
	r, err := c.Open(context.Background(), "job", bucket, key)
	if err != nil {
		t.Fatalf("opening %s: %v", key, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s (%s): %v", key, r.Outcome(), err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("closing %s: %v", key, err)
	}
	if r.Outcome().Hit() && (r.CacheBytes() != int64(len(b)) || r.S3Bytes() != 0) {
		t.Errorf("%s: a hit counted %d cache and %d S3 bytes for %d", key, r.CacheBytes(), r.S3Bytes(), len(b))
	}
	if !r.Outcome().Hit() && r.S3Bytes() != int64(len(b)) {
		t.Errorf("%s: %s counted %d S3 bytes for %d", key, r.Outcome(), r.S3Bytes(), len(b))
	}
	return b, r.Outcome()
}

func wantRead(t *testing.T, c *Cache, key string, want []byte, outcome Outcome) {
	t.Helper()
	got, o := read(t, c, key)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes that differ from the object's %d", key, len(got), len(want))
	}
	if o != outcome {
		t.Fatalf("%s: outcome %s, want %s", key, o, outcome)
	}
}

func entries(t *testing.T, dir string) (final, temp []string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		switch {
		case strings.HasPrefix(de.Name(), tempPrefix):
			temp = append(temp, de.Name())
		case strings.HasSuffix(de.Name(), entrySuffix):
			final = append(final, de.Name())
		}
	}
	return final, temp
}

func TestIntegrationCacheTiers(t *testing.T) {
	e := newEnv(t)
	a, b := randomBytes(1, 300<<10), randomBytes(2, 200<<10)
	e.put("a.tar", a)
	e.put("b.tar", b)

	t.Run("off", func(t *testing.T) {
		c, _ := newCache(t, Config{}, e.s3)
		wantRead(t, c, "a.tar", a, OutcomeOff)
		wantRead(t, c, "a.tar", a, OutcomeOff)
	})
	t.Run("disk", func(t *testing.T) {
		dir := t.TempDir()
		c, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
		wantRead(t, c, "a.tar", a, OutcomeMiss)
		wantRead(t, c, "a.tar", a, OutcomeHitDisk)
		wantRead(t, c, "b.tar", b, OutcomeMiss)
		wantRead(t, c, "b.tar", b, OutcomeHitDisk)
		if final, temp := entries(t, dir); len(final) != 2 || len(temp) != 0 {
			t.Errorf("cache dir holds %v and temporary files %v, want 2 entries", final, temp)
		}
	})
	t.Run("memory", func(t *testing.T) {
		c, _ := newCache(t, Config{MemoryBytes: 1 << 20}, e.s3)
		wantRead(t, c, "a.tar", a, OutcomeMiss)
		wantRead(t, c, "a.tar", a, OutcomeHitMemory)
	})
	t.Run("disk promotes to memory", func(t *testing.T) {
		dir := t.TempDir()
		c, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
		wantRead(t, c, "a.tar", a, OutcomeMiss)
		c2, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20, MemoryBytes: 1 << 20}, e.s3)
		wantRead(t, c2, "a.tar", a, OutcomeHitDisk)
		wantRead(t, c2, "a.tar", a, OutcomeHitMemory)
	})
	t.Run("too small keeps what fits and bypasses the rest", func(t *testing.T) {
		dir := t.TempDir()
		c, _ := newCache(t, Config{Dir: dir, DiskBytes: 400 << 10}, e.s3)
		wantRead(t, c, "a.tar", a, OutcomeMiss)
		wantRead(t, c, "b.tar", b, OutcomeBypass)
		wantRead(t, c, "a.tar", a, OutcomeHitDisk)
		wantRead(t, c, "b.tar", b, OutcomeBypass)
		if final, _ := entries(t, dir); len(final) != 1 {
			t.Errorf("cache dir holds %v, want a.tar's entry only", final)
		}
	})
	t.Run("shared directory", func(t *testing.T) {
		dir := t.TempDir()
		c1, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
		c2, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
		// Both replicas miss the same shard at once: one fills, the others
		// wait for it (or come after it) and hit; one entry, no lock file left.
		var wg sync.WaitGroup
		for _, c := range []*Cache{c1, c2, c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, _ := read(t, c, "a.tar")
				if !bytes.Equal(got, a) {
					t.Error("a concurrent read differs from the object")
				}
			}()
		}
		wg.Wait()
		wantRead(t, c2, "a.tar", a, OutcomeHitDisk)
		wantRead(t, c1, "a.tar", a, OutcomeHitDisk)
		if final, temp := entries(t, dir); len(final) != 1 || len(temp) != 0 {
			t.Errorf("cache dir holds %v and temporary files %v, want one entry", final, temp)
		}
		noLockFiles(t, dir)
	})
}

// TestIntegrationCacheChangedObject: a shard rewritten in S3 under the same
// key is read again, never served from the old entry, from either tier.
func TestIntegrationCacheChangedObject(t *testing.T) { onServers(t, testChangedObject) }

func testChangedObject(t *testing.T, e *env) {
	for _, cfg := range []Config{{Dir: t.TempDir(), DiskBytes: 1 << 20}, {MemoryBytes: 1 << 20}} {
		v1, v2 := randomBytes(3, 100<<10), randomBytes(4, 100<<10)
		e.put("s.tar", v1)
		c, _ := newCache(t, cfg, e.s3)
		wantRead(t, c, "s.tar", v1, OutcomeMiss)
		e.put("s.tar", v2)
		wantRead(t, c, "s.tar", v2, OutcomeMiss)
		got, o := read(t, c, "s.tar")
		if !bytes.Equal(got, v2) || !o.Hit() {
			t.Errorf("after re-reading the changed object: outcome %s, same bytes as v2 %v", o, bytes.Equal(got, v2))
		}
	}
}

// TestIntegrationCacheCorruptEntry: a damaged entry fails its read (the
// task is retried) and is removed; the next read goes to S3.
func TestIntegrationCacheCorruptEntry(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(5, 100<<10)
	e.put("a.tar", a)
	dir := t.TempDir()
	c, _ := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
	wantRead(t, c, "a.tar", a, OutcomeMiss)
	final, _ := entries(t, dir)
	p := filepath.Join(dir, final[0])
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := c.Open(context.Background(), "job", bucket, "a.tar")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrCorruptEntry) {
		t.Errorf("reading a damaged entry: %v, want ErrCorruptEntry", err)
	}
	r.Close()
	wantRead(t, c, "a.tar", a, OutcomeMiss)
}

// TestIntegrationCacheFullDisk: a disk that fills mid-write leaves no
// entry, logs one warning, and the shard is still read whole from S3.
func TestIntegrationCacheFullDisk(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(6, 300<<10)
	e.put("a.tar", a)
	dir := t.TempDir()
	c, logs := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
	// The disk has room for the header and 64 KiB, then ENOSPC.
	c.disk.createTemp = func(dir, pattern string) (tempFile, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		return &fullDisk{File: f, room: 64 << 10}, nil
	}
	wantRead(t, c, "a.tar", a, OutcomeMiss)
	wantRead(t, c, "a.tar", a, OutcomeMiss)
	if final, temp := entries(t, dir); len(final) != 0 || len(temp) != 0 {
		t.Errorf("after a full disk the cache dir holds %v and temporary files %v, want nothing", final, temp)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("no warning naming the full disk in the log:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 (at most one a minute)", n)
	}
}

// fullDisk is a file on a disk with room bytes left.
type fullDisk struct {
	*os.File
	room int
}

func (f *fullDisk) Write(p []byte) (int, error) {
	if len(p) > f.room {
		n, _ := f.File.Write(p[:f.room])
		f.room = 0
		return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.room -= len(p)
	return f.File.Write(p)
}

// TestIntegrationCacheUnwritableDir: a cache directory that cannot be
// created degrades to S3 with a warning; the replica still serves.
func TestIntegrationCacheUnwritableDir(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(7, 50<<10)
	e.put("a.tar", a)
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(notADir, "cache"), notADir} {
		c, logs := newCache(t, Config{Dir: dir, DiskBytes: 1 << 20}, e.s3)
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "reading shards from S3") {
			t.Errorf("cache dir %s: no warning in the log:\n%s", dir, logs)
		}
		wantRead(t, c, "a.tar", a, OutcomeOff)
		wantRead(t, c, "a.tar", a, OutcomeOff)
	}
}

// startHalfWriter starts TestCacheWriterProcess in a process of this test
// binary, caching a.tar into dir, and returns once it has written half.
func startHalfWriter(t *testing.T, e *env, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCacheWriterProcess$")
	access, _ := e.cfg.Credentials.Retrieve(context.Background())
	cmd.Env = append(os.Environ(), "SLUICE_CACHE_WRITER_DIR="+dir, "SLUICE_CACHE_WRITER_S3="+e.cfg.Endpoint,
		"SLUICE_CACHE_WRITER_KEYS="+access.AccessKeyID+":"+access.SecretAccessKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "HALF" {
	}
	return cmd
}

// TestIntegrationCacheKilledMidWrite SIGKILLs a process of this test
// binary halfway through caching a shard: no entry is left to serve, the
// next read goes to S3 and caches the shard whole, and the temporary file
// goes once stale.
func TestIntegrationCacheKilledMidWrite(t *testing.T) { onServers(t, testKilledMidWrite) }

func testKilledMidWrite(t *testing.T, e *env) {
	a := randomBytes(8, 2<<20)
	e.put("a.tar", a)
	dir := t.TempDir()

	cmd := startHalfWriter(t, e, dir)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	final, temp := entries(t, dir)
	if len(final) != 0 || len(temp) != 1 {
		t.Fatalf("after the kill the cache dir holds %v and temporary files %v, want one temporary file", final, temp)
	}
	c, _ := newCache(t, Config{Dir: dir, DiskBytes: 8 << 20}, e.s3)
	wantRead(t, c, "a.tar", a, OutcomeMiss)
	wantRead(t, c, "a.tar", a, OutcomeHitDisk)

	// A replica starting later removes the temporary file once it is stale.
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(filepath.Join(dir, temp[0]), old, old); err != nil {
		t.Fatal(err)
	}
	newCache(t, Config{Dir: dir, DiskBytes: 8 << 20}, e.s3)
	if final, temp := entries(t, dir); len(final) != 1 || len(temp) != 0 {
		t.Errorf("after a restart the cache dir holds %v and temporary files %v, want the one entry", final, temp)
	}
}

// TestCacheWriterProcess is the process TestIntegrationCacheKilledMidWrite
// kills: it reads half a shard through a cache, says so, and waits.
func TestCacheWriterProcess(t *testing.T) {
	dir, endpoint := os.Getenv("SLUICE_CACHE_WRITER_DIR"), os.Getenv("SLUICE_CACHE_WRITER_S3")
	if dir == "" {
		t.Skip("run by TestIntegrationCacheKilledMidWrite")
	}
	key, secret, _ := strings.Cut(os.Getenv("SLUICE_CACHE_WRITER_KEYS"), ":")
	s3c, err := objstore.NewClient(context.Background(), objstore.Config{Endpoint: endpoint, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCache(t, Config{Dir: dir, DiskBytes: 8 << 20}, s3c)
	r, err := c.Open(context.Background(), "job", bucket, "a.tar")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, r, 1<<20); err != nil {
		t.Fatal(err)
	}
	fmt.Println("HALF")
	time.Sleep(time.Minute)
}

// TestIntegrationCacheEvictsColdEntries: an entry unused for longer than
// the horizon (a dataset no job reads any more) makes room for a new one.
func TestIntegrationCacheEvictsColdEntries(t *testing.T) {
	e := newEnv(t)
	a, b := randomBytes(9, 300<<10), randomBytes(10, 300<<10)
	e.put("a.tar", a)
	e.put("b.tar", b)
	dir := t.TempDir()
	c, _ := newCache(t, Config{Dir: dir, DiskBytes: 400 << 10, IdleHorizon: time.Minute}, e.s3)
	wantRead(t, c, "a.tar", a, OutcomeMiss)
	wantRead(t, c, "b.tar", b, OutcomeBypass) // a is hot: b is not cached
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(filepath.Join(dir, entryName(bucket, "a.tar")), old, old); err != nil {
		t.Fatal(err)
	}
	wantRead(t, c, "b.tar", b, OutcomeMiss) // a went cold: evicted for b
	wantRead(t, c, "b.tar", b, OutcomeHitDisk)
	wantRead(t, c, "a.tar", a, OutcomeBypass)
}
