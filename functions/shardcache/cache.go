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
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
)

// Config sizes the cache. The zero value caches nothing: every read goes
// to S3 and is counted as OutcomeOff.
type Config struct {
	// Dir holds the disk tier; empty means none. Replicas of one node may
	// share it.
	Dir string `json:"dir"`
	// DiskBytes is the budget of Dir, for all replicas sharing it.
	DiskBytes int64 `json:"disk_bytes"`
	// MemoryBytes is this process's memory tier; 0 means none.
	MemoryBytes int64 `json:"memory_bytes"`
	// IdleHorizon is the least time an entry goes unused before it may be
	// evicted; twice the longest reuse seen when that is longer (default
	// one hour). See the package doc.
	IdleHorizon time.Duration `json:"idle_horizon_ns"`
	// FillWait bounds how long a read waits for another read of the same
	// shard to cache it before reading S3 itself without caching
	// (DefaultFillWait when 0).
	FillWait time.Duration `json:"fill_wait_ns"`
}

// DefaultIdleHorizon is Config.IdleHorizon's default.
const DefaultIdleHorizon = time.Hour

// Outcome says where a shard's bytes came from.
type Outcome string

// Outcomes, the label values of sluice_cache_reads_total and the values of
// wire.ShardEnd.Cache.
const (
	OutcomeOff       Outcome = "off"        // no cache configured: read from S3
	OutcomeHitMemory Outcome = "hit_memory" // served from this replica's memory
	OutcomeHitDisk   Outcome = "hit_disk"   // served from the cache directory
	OutcomeMiss      Outcome = "miss"       // read from S3 and cached
	OutcomeBypass    Outcome = "bypass"     // read from S3, not cached: no room, or the disk failed
)

const (
	// drainOnClose is how far Close reads past where the shard reader
	// stopped to complete an entry (a tar's trailing padding).
	drainOnClose = 1 << 20
	// warnEvery spaces out warnings: a full disk fails every write.
	warnEvery      = time.Minute
	readBufferSize = 256 << 10
)

// Hit says whether the bytes came from the cache.
func (o Outcome) Hit() bool { return o == OutcomeHitMemory || o == OutcomeHitDisk }

// ObjectAPI is the part of the S3 client the cache uses.
type ObjectAPI interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var _ ObjectAPI = (*s3.Client)(nil)

// Cache reads shards through the tiers. It is safe for concurrent use.
type Cache struct {
	cfg  Config
	s3   ObjectAPI
	log  *slog.Logger
	m    *metrics
	now  func() time.Time
	disk *diskTier // nil: no disk tier, or degraded
	mem  *memTier  // nil: no memory tier

	warnMu   sync.Mutex
	lastWarn time.Time

	bypasses bypassLog
	fills    fills
}

// New builds a cache reading through s3c. A cache directory that cannot be
// created or written is not an error: the cache goes on without its disk
// tier and logs a warning. A nil logger discards; a nil registerer leaves
// the metrics unregistered.
func New(cfg Config, s3c ObjectAPI, logger *slog.Logger, reg prometheus.Registerer) (*Cache, error) {
	if s3c == nil {
		return nil, errors.New("shard cache: an s3 client is required")
	}
	if cfg.DiskBytes < 0 || cfg.MemoryBytes < 0 {
		return nil, fmt.Errorf("shard cache: budgets %d (disk) and %d (memory): want >= 0", cfg.DiskBytes, cfg.MemoryBytes)
	}
	if cfg.IdleHorizon <= 0 {
		cfg.IdleHorizon = DefaultIdleHorizon
	}
	if cfg.FillWait <= 0 {
		cfg.FillWait = DefaultFillWait
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{cfg: cfg, s3: s3c, log: logger, m: newMetrics(reg), now: time.Now}
	c.fills = fills{m: map[string]chan struct{}{}, err: func(err error) {
		c.m.errors.WithLabelValues("lock").Inc()
		c.warn("a cache fill lock failed: other replicas may read the shard from S3 meanwhile", "err", err)
	}}
	if cfg.MemoryBytes > 0 {
		c.mem = newMemTier(cfg.MemoryBytes, cfg.IdleHorizon)
	}
	if cfg.Dir != "" && cfg.DiskBytes > 0 {
		d, stale, err := newDiskTier(cfg.Dir, cfg.DiskBytes, cfg.IdleHorizon, c.now())
		if err != nil {
			c.m.errors.WithLabelValues("open").Inc()
			c.m.degraded.Set(1)
			logger.Warn("shard cache directory unusable: reading shards from S3", "dir", cfg.Dir, "err", err)
		} else {
			c.disk = d
			c.fills.dir = cfg.Dir
			if stale > 0 {
				logger.Info("removed cache entries left unfinished by killed replicas", "dir", cfg.Dir, "files", stale)
			}
		}
	}
	return c, nil
}

// Enabled says whether any tier caches.
func (c *Cache) Enabled() bool { return c.disk != nil || c.mem != nil }

// Reader serves one shard's bytes. Close it: that completes the entry a
// miss is writing.
type Reader struct {
	io.Reader
	outcome   Outcome
	size      int64
	fromS3    *counter
	fromCache *counter
	closeFn   func() error
	closed    bool
}

// Outcome says where the bytes come from.
func (r *Reader) Outcome() Outcome { return r.outcome }

// S3Bytes and CacheBytes are the bytes read so far from each.
func (r *Reader) S3Bytes() int64    { return r.fromS3.n }
func (r *Reader) CacheBytes() int64 { return r.fromCache.n }

// Close ends the read; a miss that reached the object's end (or comes
// within a short drain of it) becomes a cache entry.
// Closing again does nothing.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.closeFn()
}

// Open reads s3://bucket/key for job, from the cache when it holds the
// object's current version. A read the cache does not keep although it is
// meant to is counted, and logged once per job and reason (Bypass).
// Errors from S3 are returned wrapped, with the SDK's error kept
// (errors.As finds types.NoSuchKey).
//
// One read at a time fills an entry: a read that misses while another
// read of the shard (in this process or another sharing the directory) is
// filling it waits for that fill to end, at most Config.FillWait, and is
// then a hit, or reads S3 as a miss does when no entry came. A wait that
// ctx ends returns ctx's error.
func (c *Cache) Open(ctx context.Context, job, bucket, key string) (*Reader, error) {
	name := entryName(bucket, key)
	if !c.Enabled() {
		return c.openS3Logged(ctx, job, bucket, key, name, nil, "")
	}
	var waitStart time.Time // zero until this read first waits
	ended := func(o fillOutcome) {
		if !waitStart.IsZero() {
			c.m.fillWaits.WithLabelValues(string(o)).Inc()
		}
	}
	for {
		r, err := c.openCached(ctx, bucket, key, name)
		if r != nil || err != nil {
			if r != nil {
				ended(fillHit)
			}
			return r, err
		}
		h, wake := c.fills.acquire(name)
		if h != nil {
			// A fill may have committed since openCached looked.
			r, err := c.openCached(ctx, bucket, key, name)
			if r != nil || err != nil {
				h.release()
				if r != nil {
					ended(fillHit)
				}
				return r, err
			}
			ended(fillFallback)
			return c.openS3Logged(ctx, job, bucket, key, name, h, "")
		}
		now := c.now()
		if waitStart.IsZero() {
			waitStart = now
		}
		poll := fillPoll // another process fills: try its lock again soon
		if wake != nil {
			poll = c.cfg.FillWait // this process fills: wake says when it ends
		}
		sleep, giveUp := waitStep(now.Sub(waitStart), c.cfg.FillWait, poll)
		if giveUp {
			ended(fillTimeout)
			return c.openS3Logged(ctx, job, bucket, key, name, nil, BypassFillWait)
		}
		t := time.NewTimer(sleep)
		c.fills.waits(1)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			c.fills.waits(-1)
			ended(fillCancelled)
			return nil, fmt.Errorf("waiting for another read to cache the shard: %w", ctx.Err())
		}
		t.Stop()
		c.fills.waits(-1)
	}
}

// openS3Logged is openS3, counting and logging a bypass.
func (c *Cache) openS3Logged(ctx context.Context, job, bucket, key, name string, h *fill, force Bypass) (*Reader, error) {
	r, why, err := c.openS3(ctx, bucket, key, name, h, force)
	if why != "" {
		c.bypassed(job, key, r.size, why)
	}
	return r, err
}

// openCached serves a cached entry whose ETag is the object's current one;
// nil, nil when there is none.
func (c *Cache) openCached(ctx context.Context, bucket, key, name string) (*Reader, error) {
	var (
		etag    string
		data    []byte
		f       *os.File
		info    entryInfo
		lastUse time.Time
	)
	memETag, memData, _, inMem := c.memGet(name)
	if inMem {
		etag, data = memETag, memData
	} else if c.disk != nil {
		var err error
		f, info, lastUse, err = c.disk.open(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil
		case err != nil:
			c.m.errors.WithLabelValues("read").Inc()
			c.warn("reading a cache entry failed: reading the shard from S3", "key", key, "err", err)
			return nil, nil
		}
		etag = info.etag
	} else {
		return nil, nil
	}
	head, err := c.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("checking etag: %w", err)
	}
	if current := aws.ToString(head.ETag); current != etag || current == "" {
		// The object changed since it was cached: never serve the old bytes.
		if f != nil {
			f.Close()
		}
		c.mem.removeIfAny(name)
		if c.disk != nil {
			c.disk.remove(name)
		}
		c.m.stale.Inc()
		c.log.Debug("cached shard changed in S3: reading it again", "key", key, "cached_etag", etag, "etag", current)
		return nil, nil
	}
	now := c.now()
	if inMem {
		return c.memoryHit(name, data, now), nil
	}
	return c.diskHit(key, name, etag, f, info, lastUse, now), nil
}

// memoryHit reads the cached shard data from memory.
func (c *Cache) memoryHit(name string, data []byte, now time.Time) *Reader {
	fromCache := &counter{}
	c.mem.touch(name, now)
	c.m.reads.WithLabelValues(string(OutcomeHitMemory)).Inc()
	r := &Reader{outcome: OutcomeHitMemory, size: int64(len(data)), fromS3: &counter{}, fromCache: fromCache}
	r.Reader = &countingReader{r: bytes.NewReader(data), n: fromCache, m: c.m.bytes.WithLabelValues("memory")}
	r.closeFn = func() error { return nil }
	return r
}

// diskHit reads the cached shard from its disk entry f, checking its
// checksum, and promotes it to memory as it is read when memory admits it.
func (c *Cache) diskHit(key, name, etag string, f *os.File, info entryInfo, lastUse, now time.Time) *Reader {
	fromCache := &counter{}
	c.disk.touch(name, lastUse, now)
	unpin := c.disk.pin(name)
	c.m.reads.WithLabelValues(string(OutcomeHitDisk)).Inc()
	checked := newCheckedReader(io.NewSectionReader(f, info.headerLen, info.size), info.size, info.crc, func() {
		c.m.errors.WithLabelValues("corrupt").Inc()
		c.warn("cache entry failed its checksum: removed", "key", key)
		c.disk.remove(name)
	})
	r := &Reader{outcome: OutcomeHitDisk, size: info.size, fromS3: &counter{}, fromCache: fromCache}
	var src io.Reader = bufio.NewReaderSize(checked, readBufferSize)
	// Promote to memory when it admits the shard: this replica reads it
	// again next epoch (locality sends it here).
	promote := c.memReserve(info.size, now)
	var buf *bytes.Buffer
	if promote {
		buf = bytes.NewBuffer(make([]byte, 0, info.size))
		src = io.TeeReader(src, buf)
	}
	cr := &countingReader{r: src, n: fromCache, m: c.m.bytes.WithLabelValues("disk")}
	r.Reader = cr
	r.closeFn = func() error {
		defer unpin()
		if promote {
			var data []byte
			if cr.eof && int64(buf.Len()) == info.size {
				data = buf.Bytes()
			}
			c.mem.put(name, etag, info.size, data, c.now())
		}
		return f.Close()
	}
	return r
}

// openS3 streams the object from S3, copying it into the tiers that admit
// it; why says why it is not cached by a cache meant to cache. h is the
// fill this read holds, released once the entry is committed or
// abandoned; force, when set, is why this read does not cache.
func (c *Cache) openS3(ctx context.Context, bucket, key, name string, h *fill, force Bypass) (*Reader, Bypass, error) {
	obj, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		h.release()
		return nil, "", fmt.Errorf("getting object: %w", err)
	}
	etag, size := aws.ToString(obj.ETag), aws.ToInt64(obj.ContentLength)
	now := c.now()
	outcome, why := OutcomeOff, Bypass("")
	var w *entryWriter
	var buf *bytes.Buffer
	switch {
	case force != "":
		outcome, why = OutcomeBypass, force
	case c.Enabled():
		outcome = OutcomeBypass
		if etag == "" || obj.ContentLength == nil {
			why = BypassNoETag
			break
		}
		w, why = c.beginDisk(name, etag, size, now, key)
		if c.memReserve(size, now) {
			buf = bytes.NewBuffer(make([]byte, 0, size))
		} else if why == "" {
			why = BypassNoRoom // memory only
		}
		if w != nil || buf != nil {
			outcome, why = OutcomeMiss, ""
		}
	case c.cfg.Dir != "" && c.cfg.DiskBytes > 0:
		why = BypassNoDirectory // degraded when opened
	}
	c.m.reads.WithLabelValues(string(outcome)).Inc()
	fromS3 := &counter{}
	cr := &countingReader{r: obj.Body, n: fromS3, m: c.m.bytes.WithLabelValues("s3")}
	r := &Reader{outcome: outcome, size: size, fromS3: fromS3, fromCache: &counter{}}
	if w == nil && buf == nil {
		h.release() // nothing to wait for: the others read S3 too
		r.Reader = cr
		r.closeFn = obj.Body.Close
		return r, why, nil
	}
	tee := &teeReader{r: cr, w: w, buf: buf, onWriteErr: func(err error) {
		c.m.errors.WithLabelValues("write").Inc()
		c.warn("writing a cache entry failed: reading shards from S3", "key", key, "err", err)
	}}
	r.Reader = tee
	r.closeFn = func() error {
		defer h.release() // after the entry is committed or abandoned
		// A tar reader stops at the end-of-archive blocks, short of the
		// object's end: read the rest (padding) to complete the entry.
		if !cr.eof && size-fromS3.n <= drainOnClose {
			_, _ = io.Copy(io.Discard, tee)
		}
		if w != nil {
			if cr.eof && !tee.failed {
				if err := w.commit(); err != nil {
					c.m.errors.WithLabelValues("write").Inc()
					c.warn("writing a cache entry failed: reading shards from S3", "key", key, "err", err)
				}
			} else {
				w.abort()
			}
		}
		if buf != nil {
			var data []byte
			if cr.eof && int64(buf.Len()) == size {
				data = buf.Bytes()
			}
			c.mem.put(name, etag, size, data, c.now())
		}
		return obj.Body.Close()
	}
	return r, "", nil
}

// beginDisk starts a disk entry when the disk tier admits size bytes; nil
// and why when it does not or cannot (nil and "" without a disk tier).
func (c *Cache) beginDisk(name, etag string, size int64, now time.Time, key string) (*entryWriter, Bypass) {
	if c.disk == nil {
		return nil, ""
	}
	ok, evicted, err := c.disk.admit(size, now)
	c.m.evictions.WithLabelValues("disk").Add(float64(evicted))
	if err != nil {
		c.m.errors.WithLabelValues("write").Inc()
		c.warn("cache directory unreadable: reading shards from S3", "dir", c.cfg.Dir, "err", err)
		return nil, BypassNoDirectory
	}
	if !ok {
		return nil, BypassNoRoom
	}
	w, err := c.disk.begin(name, etag, size)
	if err != nil {
		c.m.errors.WithLabelValues("write").Inc()
		c.warn("writing a cache entry failed: reading shards from S3", "key", key, "err", err)
		return nil, BypassNoDirectory
	}
	return w, ""
}

func (c *Cache) memGet(name string) (string, []byte, time.Time, bool) {
	if c.mem == nil {
		return "", nil, time.Time{}, false
	}
	return c.mem.get(name)
}

func (c *Cache) memReserve(size int64, now time.Time) bool {
	if c.mem == nil {
		return false
	}
	ok, evicted := c.mem.reserve(size, now)
	c.m.evictions.WithLabelValues("memory").Add(float64(evicted))
	return ok
}

func (m *memTier) removeIfAny(name string) {
	if m != nil {
		m.remove(name)
	}
}

// warn logs at most once a minute: a full disk fails every write, and one
// line says it.
func (c *Cache) warn(msg string, args ...any) {
	c.warnMu.Lock()
	now := c.now()
	quiet := !c.lastWarn.IsZero() && now.Sub(c.lastWarn) < warnEvery
	if !quiet {
		c.lastWarn = now
	}
	c.warnMu.Unlock()
	if !quiet {
		c.log.Warn(msg, args...)
	}
}

// counter counts bytes of one read; one goroutine reads a shard.
type counter struct{ n int64 }

type countingReader struct {
	r   io.Reader
	n   *counter
	m   prometheus.Counter
	eof bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.n += int64(n)
	c.m.Add(float64(n))
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

// teeReader copies what it reads into a disk entry and a memory buffer. A
// failed disk write abandons the entry but never the read.
type teeReader struct {
	r          io.Reader
	w          *entryWriter
	buf        *bytes.Buffer
	failed     bool
	onWriteErr func(error)
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if t.w != nil && !t.failed {
			if werr := t.w.write(p[:n]); werr != nil {
				t.failed = true
				t.onWriteErr(werr)
			}
		}
		if t.buf != nil {
			t.buf.Write(p[:n])
		}
	}
	return n, err
}
