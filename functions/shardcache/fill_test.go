package shardcache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
)

func TestWaitStep(t *testing.T) {
	const poll, bound = 15 * time.Millisecond, 30 * time.Second
	for _, tc := range []struct {
		waited, bound, poll time.Duration
		sleep               time.Duration
		giveUp              bool
	}{
		{0, bound, poll, poll, false},
		{10 * time.Second, bound, poll, poll, false},
		{bound - 5*time.Millisecond, bound, poll, 5 * time.Millisecond, false}, // never past the bound
		{bound, bound, poll, 0, true},
		{bound + time.Hour, bound, poll, 0, true},
		{10 * time.Second, bound, bound, 20 * time.Second, false}, // woken, not polling: the rest of the bound
	} {
		sleep, giveUp := waitStep(tc.waited, tc.bound, tc.poll)
		if sleep != tc.sleep || giveUp != tc.giveUp {
			t.Errorf("waitStep(%v, %v, %v) = %v, %v; want %v, %v", tc.waited, tc.bound, tc.poll, sleep, giveUp, tc.sleep, tc.giveUp)
		}
	}
}

// countingS3 counts the GetObjects of a real S3 client.
type countingS3 struct {
	ObjectAPI
	gets atomic.Int64
}

func (c *countingS3) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	c.gets.Add(1)
	return c.ObjectAPI.GetObject(ctx, in, opts...)
}

// opened is the end of an Open run in the background.
type opened struct {
	data    []byte
	outcome Outcome
	err     error
}

// openBehind opens key through c in the background and reads it whole.
func openBehind(ctx context.Context, c *Cache, key string) <-chan opened {
	ch := make(chan opened, 1)
	go func() {
		r, err := c.Open(ctx, "job", bucket, key)
		if err != nil {
			ch <- opened{err: err}
			return
		}
		b, err := io.ReadAll(r)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		ch <- opened{data: b, outcome: r.Outcome(), err: err}
	}()
	return ch
}

// waitWaiting waits until a read waits in c for a fill; it fails the test
// if the read returned instead.
func waitWaiting(t *testing.T, c *Cache, ch <-chan opened) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.fills.waitingNow() == 0 {
		select {
		case o := <-ch:
			t.Fatalf("the second read did not wait for the fill: it returned %s (err %v)", o.outcome, o.err)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the second read neither waits nor returns")
		}
	}
}

// startFill opens key through c and reads part of it: the fill is held
// until the reader is closed.
func startFill(t *testing.T, c *Cache, key string, part int64) *Reader {
	t.Helper()
	r, err := c.Open(context.Background(), "job", bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if r.Outcome() != OutcomeMiss {
		t.Fatalf("first read: %s, want miss", r.Outcome())
	}
	if _, err := io.CopyN(io.Discard, r, part); err != nil {
		t.Fatal(err)
	}
	return r
}

// counted is the value of c's counter name{label=value}.
func counted(t *testing.T, c *Cache, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.m.fillWaits, c.m.bypasses)
	n, err := testenv.Counter(reg, name, label, value)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func noLockFiles(t *testing.T, dir string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), lockPrefix) {
			t.Errorf("lock file %s left in the cache dir", de.Name())
		}
	}
}

// TestIntegrationCacheSingleFill: a read of a shard another read is
// caching waits for that fill and is served from the entry; S3 is read
// once. Within one process (disk, memory only), and across two caches
// sharing a directory, which coordinate through its lock files alone.
func TestIntegrationCacheSingleFill(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(11, 2<<20)
	e.put("a.tar", a)
	for _, tc := range []struct {
		name     string
		cfg      Config
		replicas bool
		hit      Outcome
	}{
		{"disk", Config{Dir: t.TempDir(), DiskBytes: 8 << 20}, false, OutcomeHitDisk},
		{"memory only", Config{MemoryBytes: 8 << 20}, false, OutcomeHitMemory},
		{"disk and memory", Config{Dir: t.TempDir(), DiskBytes: 8 << 20, MemoryBytes: 8 << 20}, false, OutcomeHitMemory},
		{"two replicas", Config{Dir: t.TempDir(), DiskBytes: 8 << 20}, true, OutcomeHitDisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3c := &countingS3{ObjectAPI: e.s3}
			filler, _ := newCache(t, tc.cfg, s3c)
			waiter := filler
			if tc.replicas {
				waiter, _ = newCache(t, tc.cfg, s3c)
			}
			r := startFill(t, filler, "a.tar", 512<<10)
			ch := openBehind(context.Background(), waiter, "a.tar")
			waitWaiting(t, waiter, ch)
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if len(rest) != len(a)-512<<10 {
				t.Fatalf("the filler read %d bytes after the first 512 KiB, want %d", len(rest), len(a)-512<<10)
			}
			o := <-ch
			if o.err != nil || !bytes.Equal(o.data, a) || o.outcome != tc.hit {
				t.Fatalf("the waiting read: %s, err %v, same bytes %v; want %s", o.outcome, o.err, bytes.Equal(o.data, a), tc.hit)
			}
			if n := s3c.gets.Load(); n != 1 {
				t.Errorf("%d GETs from S3, want 1", n)
			}
			if n := counted(t, waiter, "sluice_cache_fill_waits_total", "outcome", string(fillHit)); n != 1 {
				t.Errorf("fill waits ending in a hit: %v, want 1", n)
			}
			if tc.cfg.Dir != "" {
				noLockFiles(t, tc.cfg.Dir)
			}
		})
	}
}

// TestIntegrationCacheFillAborted: a fill that ends without an entry (its
// reader closed early) lets the waiting read go to S3, which then caches
// the shard.
func TestIntegrationCacheFillAborted(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(12, 3<<20) // more than drainOnClose past what the filler reads
	e.put("a.tar", a)
	for _, replicas := range []bool{false, true} {
		dir := t.TempDir()
		cfg := Config{Dir: dir, DiskBytes: 8 << 20}
		filler, _ := newCache(t, cfg, e.s3)
		waiter := filler
		if replicas {
			waiter, _ = newCache(t, cfg, e.s3)
		}
		r := startFill(t, filler, "a.tar", 64<<10)
		ch := openBehind(context.Background(), waiter, "a.tar")
		waitWaiting(t, waiter, ch)
		r.Close()
		o := <-ch
		if o.err != nil || !bytes.Equal(o.data, a) || o.outcome != OutcomeMiss {
			t.Fatalf("replicas %v: the waiting read: %s, err %v, same bytes %v; want a miss", replicas, o.outcome, o.err, bytes.Equal(o.data, a))
		}
		if n := counted(t, waiter, "sluice_cache_fill_waits_total", "outcome", string(fillFallback)); n != 1 {
			t.Errorf("replicas %v: fill waits ending in a fallback: %v, want 1", replicas, n)
		}
		wantRead(t, filler, "a.tar", a, OutcomeHitDisk)
		noLockFiles(t, dir)
	}
}

// TestIntegrationCacheFillWaitCancelled: a read waiting for a fill returns
// its ctx's error once ctx ends, with the fill still going.
func TestIntegrationCacheFillWaitCancelled(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(13, 2<<20)
	e.put("a.tar", a)
	for _, cfg := range []Config{{Dir: t.TempDir(), DiskBytes: 8 << 20}, {MemoryBytes: 8 << 20}} {
		c, _ := newCache(t, cfg, e.s3)
		r := startFill(t, c, "a.tar", 64<<10)
		ctx, cancel := context.WithCancel(context.Background())
		ch := openBehind(ctx, c, "a.tar")
		waitWaiting(t, c, ch)
		cancel()
		if o := <-ch; !errors.Is(o.err, context.Canceled) {
			t.Errorf("a cancelled wait returned %s, err %v; want context.Canceled", o.outcome, o.err)
		}
		r.Close()
	}
}

// TestIntegrationCacheFillWaitBound: a read waits for another's fill at
// most Config.FillWait, then reads S3 without caching, counted and logged
// as a fill_wait bypass; the fill still commits.
func TestIntegrationCacheFillWaitBound(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(14, 2<<20)
	e.put("a.tar", a)
	dir := t.TempDir()
	c, logs := newCache(t, Config{Dir: dir, DiskBytes: 8 << 20, FillWait: time.Millisecond}, e.s3)
	r := startFill(t, c, "a.tar", 64<<10)
	wantRead(t, c, "a.tar", a, OutcomeBypass)
	wantRead(t, c, "a.tar", a, OutcomeBypass)
	if n := counted(t, c, "sluice_cache_bypass_total", "reason", string(BypassFillWait)); n != 2 {
		t.Errorf("fill_wait bypasses: %v, want 2", n)
	}
	if n := counted(t, c, "sluice_cache_fill_waits_total", "outcome", string(fillTimeout)); n != 2 {
		t.Errorf("fill waits timed out: %v, want 2", n)
	}
	if n := strings.Count(logs.String(), "reason=fill_wait"); n != 1 {
		t.Errorf("%d warnings naming fill_wait, want 1 (once per job and reason):\n%s", n, logs)
	}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wantRead(t, c, "a.tar", a, OutcomeHitDisk)
	if final, temp := entries(t, dir); len(final) != 1 || len(temp) != 0 {
		t.Errorf("cache dir holds %v and temporary files %v, want the filler's entry only", final, temp)
	}
}

// TestIntegrationCacheFillerKilled: a replica killed while it fills leaves
// its lock to the kernel, which drops it: the read waiting on it in
// another process goes on and caches the shard.
func TestIntegrationCacheFillerKilled(t *testing.T) {
	e := newEnv(t)
	a := randomBytes(8, 2<<20)
	e.put("a.tar", a)
	dir := t.TempDir()

	cmd := startHalfWriter(t, e, dir)
	c, _ := newCache(t, Config{Dir: dir, DiskBytes: 8 << 20}, e.s3)
	ch := openBehind(context.Background(), c, "a.tar")
	waitWaiting(t, c, ch)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	o := <-ch
	if o.err != nil || !bytes.Equal(o.data, a) || o.outcome != OutcomeMiss {
		t.Fatalf("the read behind the killed filler: %s, err %v, same bytes %v; want a miss", o.outcome, o.err, bytes.Equal(o.data, a))
	}
	wantRead(t, c, "a.tar", a, OutcomeHitDisk)
	noLockFiles(t, dir)
}

// TestCacheStaleLockFiles: a lock file no process holds, older than
// staleTemp (a killed filler's), is removed when a cache opens the
// directory and by the eviction scan; a held one stays, and neither is
// taken for an entry.
func TestCacheStaleLockFiles(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * staleTemp)
	mk := func(name string) string {
		p := dir + "/" + lockPrefix + name
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	left, held := mk("left"), mk("held")
	hf, err := lockFile(held)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	d, removed, err := newDiskTier(dir, 1<<20, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) || removed != 1 {
		t.Errorf("a free stale lock file: stat %v, %d removed; want it removed", err, removed)
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("a held lock file: %v, want it kept", err)
	}
	left = mk("left2")
	ok, evicted, err := d.admit(1<<20, time.Now())
	if err != nil || !ok || evicted != 0 {
		t.Errorf("admit with only lock files in the dir: %v, %d evicted, %v; want room and nothing evicted", ok, evicted, err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the eviction scan left a free stale lock file: %v", err)
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("the eviction scan removed a held lock file: %v", err)
	}
}
