package shardcache

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-project/sluice/internal/logbuf"
)

// noETag is S3 as a gateway serves files dropped into its directory: the
// objects come without an ETag. gofakes3 always gives one, so the ETag is
// taken off at the cache's S3 seam.
type noETag struct{ ObjectAPI }

func (n noETag) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	out, err := n.ObjectAPI.HeadObject(ctx, in, opts...)
	if out != nil {
		out.ETag = nil
	}
	return out, err
}

func (n noETag) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	out, err := n.ObjectAPI.GetObject(ctx, in, opts...)
	if out != nil {
		out.ETag = nil
	}
	return out, err
}

// readFor reads key through c for job, and says where it came from.
func readFor(t *testing.T, c *Cache, job, key string) Outcome {
	t.Helper()
	r, err := c.Open(context.Background(), job, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	return r.Outcome()
}

// TestCacheSaysOncePerJobWhyItDoesNotCache: a cache that is meant to cache
// and does not logs one warning per job and reason, naming both, and
// counts every such read by reason.
func TestCacheSaysOncePerJobWhyItDoesNotCache(t *testing.T) {
	e := newEnv(t)
	e.put("a.tar", randomBytes(8, 100<<10))
	e.put("b.tar", randomBytes(9, 100<<10))
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		cfg     Config
		s3      ObjectAPI
		outcome Outcome
		why     Bypass
		detail  string
	}{
		{"objects without an ETag", Config{Dir: t.TempDir(), DiskBytes: 1 << 20, MemoryBytes: 1 << 20}, noETag{e.s3},
			OutcomeBypass, BypassNoETag, "no ETag"},
		{"a disk too small", Config{Dir: t.TempDir(), DiskBytes: 10 << 10}, e.s3,
			OutcomeBypass, BypassNoRoom, "a shard of 102400 bytes does not fit the cache (disk budget 10240, memory budget 0 bytes)"},
		{"a memory tier too small", Config{MemoryBytes: 10 << 10}, e.s3,
			OutcomeBypass, BypassNoRoom, "memory budget 10240 bytes"},
		{"no directory", Config{Dir: filepath.Join(notADir, "cache"), DiskBytes: 1 << 20}, e.s3,
			OutcomeOff, BypassNoDirectory, "cannot be used"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			reg := prometheus.NewRegistry()
			cache, err := New(c.cfg, c.s3, slog.New(slog.NewTextHandler(logs, nil)), reg)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // epochs
				for _, job := range []string{"j1", "j2"} {
					for _, key := range []string{"a.tar", "b.tar"} {
						if o := readFor(t, cache, job, key); o != c.outcome {
							t.Fatalf("%s %s: outcome %s, want %s", job, key, o, c.outcome)
						}
					}
				}
			}
			var told []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "does not cache this job's shards") {
					told = append(told, line)
				}
			}
			if len(told) != 2 {
				t.Fatalf("%d lines say why, want one per job:\n%s", len(told), logs)
			}
			for i, job := range []string{"j1", "j2"} {
				for _, want := range []string{"level=WARN", "job=" + job, "reason=" + string(c.why), c.detail} {
					if !strings.Contains(told[i], want) {
						t.Errorf("line %q does not say %q", told[i], want)
					}
				}
			}
			if n := bypassCount(t, reg, c.why); n != 12 {
				t.Errorf("sluice_cache_bypass_total{reason=%q} = %v, want 12 (every read)", c.why, n)
			}
		})
	}
}

// TestCacheThatCachesSaysNothing: reads that are cached, or not meant to
// be (no cache configured), log no reason.
func TestCacheThatCachesSaysNothing(t *testing.T) {
	e := newEnv(t)
	e.put("a.tar", randomBytes(10, 10<<10))
	for _, cfg := range []Config{{Dir: t.TempDir(), DiskBytes: 1 << 20}, {}} {
		c, logs := newCache(t, cfg, e.s3)
		readFor(t, c, "j", "a.tar")
		readFor(t, c, "j", "a.tar")
		if strings.Contains(logs.String(), "does not cache") {
			t.Errorf("config %+v: %s", cfg, logs)
		}
	}
}

func bypassCount(t *testing.T, reg *prometheus.Registry, why Bypass) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_cache_bypass_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == string(why) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
