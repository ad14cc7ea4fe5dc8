package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-project/sluice/format/lines"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/wire"
)

// Errors ProcessShard wraps for failures that retrying cannot fix.
var (
	// ErrInvalidTask: the task cannot be processed as given (bad field,
	// unknown pipeline, unsupported shard suffix).
	ErrInvalidTask = errors.New("invalid shard task")
	// ErrShardNotFound: the shard's bucket or object does not exist.
	ErrShardNotFound = errors.New("shard not found")
)

// sinkError is a frame the sink would not take: the shard's output has
// nowhere to go, so the shard is given up.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// ProcessShard preprocesses one shard, writing its output to sink as it
// goes: a chunk frame as soon as the chunker closes each chunk, then an
// end frame with the shard's ShardEnd, which it also returns. Bad samples
// do not fail the shard: they are listed in the end (within
// wire.MaxFailedListed). On an error no end frame is written, and the
// caller reports the failure (Handler: a status if no frame was sent yet,
// else an error frame); it wraps ErrInvalidTask or ErrShardNotFound when
// retrying cannot help, any other error is transient. ctx ending, or the
// sink failing, stops the shard at the next sample. ProcessShard does no
// admission control (Handler does).
func (s *Server) ProcessShard(ctx context.Context, task wire.ShardTask, sink FrameSink) (wire.ShardEnd, error) {
	start := time.Now()
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()
	log := s.log.With("task", task.ID(), "shard_key", task.Key)

	end, err := s.processShard(ctx, task, sink, log)

	outcome := outcomeOK
	var se *sinkError
	switch {
	case err == nil:
	case errors.Is(err, ErrInvalidTask):
		outcome = outcomeInvalid
	case errors.Is(err, ErrShardNotFound):
		outcome = outcomeNotFound
	case errors.As(err, &se) || ctx.Err() != nil:
		outcome = outcomeAbandoned
	default:
		outcome = outcomeError
	}
	s.m.shards.WithLabelValues(outcome).Inc()
	s.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		log.Warn("shard failed", "outcome", outcome, "err", err, "chunks_sent", end.Chunks, "duration", time.Since(start))
		return end, err
	}
	log.Info("shard done", "samples", end.Samples, "failed", end.FailedCount(), "chunks", end.Chunks,
		"bytes", end.Bytes, "cache", end.Cache, "duration", time.Since(start))
	return end, nil
}

// processShard returns the end so far (its Chunks are the chunks sent)
// with any error.
func (s *Server) processShard(ctx context.Context, task wire.ShardTask, sink FrameSink, log *slog.Logger) (wire.ShardEnd, error) {
	r := &shardRun{s: s, task: task, sink: sink, log: log,
		end: wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard}}
	if err := task.Validate(); err != nil {
		return r.end, fmt.Errorf("%w: %w", ErrInvalidTask, err)
	}
	p, err := s.pipelines.get(task.Pipeline, task.Expand)
	if err != nil {
		return r.end, fmt.Errorf("%w: task %s: %w", ErrInvalidTask, task.ID(), err)
	}
	format, err := shardFormat(task.Key)
	if err != nil {
		return r.end, fmt.Errorf("%w: task %s: %w", ErrInvalidTask, task.ID(), err)
	}
	pk, err := shardPacker(p, task)
	if err != nil {
		return r.end, fmt.Errorf("%w: task %s: %w", ErrInvalidTask, task.ID(), err)
	}

	if format == "parquet" {
		return r.end, r.parquet(ctx, p, pk)
	}
	// The shard cache reads from S3 unless it holds the object's current
	// version; it is a plain S3 read when no cache is configured.
	obj, err := s.cache.Open(ctx, task.Job, task.Bucket, task.Key)
	if err != nil {
		if isNotFound(err) {
			return r.end, fmt.Errorf("%w: fetching shard s3://%s/%s: %w", ErrShardNotFound, task.Bucket, task.Key, objstore.Explain(err))
		}
		return r.end, fmt.Errorf("fetching shard s3://%s/%s: %w", task.Bucket, task.Key, objstore.Explain(err))
	}
	defer obj.Close()
	body := &readErr{r: obj}
	var rd sampleReader = wds.NewLimitedReader(body, wds.Limits{MaxMemberBytes: s.cfg.MaxMemberBytes,
		MaxSampleBytes: s.cfg.MaxSampleBytes, MaxSampleMembers: s.cfg.MaxSampleMembers})
	if format != "tar" {
		rd = lines.NewReader(body, task.Key, format, int(min(s.cfg.MaxMemberBytes, math.MaxInt32)))
	}
	if err := r.process(ctx, p, pk, rd, body); err != nil {
		return r.end, err
	}
	// Closing completes the cache entry a miss was writing; only then are
	// the bytes read from S3 all counted.
	obj.Close()
	err = r.finish(string(obj.Outcome()), obj.S3Bytes(), obj.CacheBytes())
	return r.end, err
}

// shardRun is one shard being processed: where its frames go and its end
// so far.
type shardRun struct {
	s    *Server
	task wire.ShardTask
	sink FrameSink
	log  *slog.Logger
	end  wire.ShardEnd
}

// process runs every sample of rd through p and sends the chunks, each as
// soon as it is full, then the last.
func (r *shardRun) process(ctx context.Context, p pipeline.Pipeline, pk *pipeline.Packer, rd sampleReader, body *readErr) error {
	task := r.task
	ch := newChunker(task)
	var ids []int32 // a document's, the buffer reused
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("processing shard %s: %w", task.ID(), err)
		}
		sample, err := rd.Next()
		// The tar reader reports a broken stream as a failed sample; when
		// the break came from S3 rather than the object's bytes, it is
		// transient, and the rest of the shard must not be given up.
		if body.err != nil {
			return fmt.Errorf("reading shard s3://%s/%s: %w", task.Bucket, task.Key, body.err)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			r.fail(se.Key, se.Reason)
			continue
		}
		if err != nil {
			return fmt.Errorf("reading shard s3://%s/%s: %w", task.Bucket, task.Key, err)
		}
		out, err := p.ProcessContext(ctx, sample, pipeline.SampleSeed(task.Seed, task.Epoch, sample.Key))
		if err != nil {
			r.fail(sample.Key, err.Error())
			continue
		}
		out.Key = sample.Key
		if pk == nil {
			if err := r.add(ch, out); err != nil {
				return err
			}
			continue
		}
		// Packing: the sample is a document; its rows go out as they
		// fill, a row's worth of ids at a time, so that a long document
		// is never held whole as rows.
		if ids, err = pipeline.AppendDocIDs(ids[:0], out); err != nil {
			r.fail(sample.Key, err.Error())
			continue
		}
		for rest := ids; ; {
			n := min(len(rest), pk.Options().SeqLen)
			pk.Append(rest[:n])
			if rest = rest[n:]; len(rest) == 0 {
				pk.EndDocument()
			}
			for _, row := range pk.Take() {
				if err := r.add(ch, row); err != nil {
					return err
				}
			}
			if len(rest) == 0 {
				break
			}
		}
	}
	if pk != nil {
		for _, row := range pk.Close() {
			if err := r.add(ch, row); err != nil {
				return err
			}
		}
	}
	last, err := ch.close()
	if err != nil {
		return err
	}
	if last != nil {
		return r.send(last)
	}
	return nil
}

// add puts an output (a sample's, or a packed row) into the open chunk,
// sending the chunk it closed; an output that cannot go into a chunk
// fails under its key.
func (r *shardRun) add(ch *chunker, out pipeline.Output) error {
	full, err := ch.add(out)
	if err != nil {
		r.fail(out.Key, err.Error())
		return nil
	}
	if full != nil {
		return r.send(full)
	}
	return nil
}

// shardPacker is the packer of the task's shard when its pipeline packs
// (nil when not): a packing pipeline's outputs are documents, packed into
// rows over the shard, keyed by the shard's name and their index, so a
// shard processed again gives the same rows under the same keys.
func shardPacker(p pipeline.Pipeline, task wire.ShardTask) (*pipeline.Packer, error) {
	po, ok := pipeline.PackingOf(p)
	if !ok {
		return nil, nil
	}
	pk, err := pipeline.NewPacker(po, shardName(task.Key))
	if err != nil {
		return nil, err
	}
	if size := packedRowSize(po, shardName(task.Key)); size > task.ChunkMaxBytes {
		return nil, fmt.Errorf("pack seq_len %d: a row is %d bytes as a chunk, over the job's chunk_max_bytes %d",
			po.SeqLen, size, task.ChunkMaxBytes)
	}
	return pk, nil
}

// packedRowSize bounds a packed row's size as a chunk of its own: every
// row has the same shapes, so one that does not fit means none does, and
// the shard is refused rather than all its rows failed.
func packedRowSize(po pipeline.PackOptions, prefix string) int {
	pk, err := pipeline.NewPacker(po, prefix)
	if err != nil {
		return math.MaxInt
	}
	pk.Append(make([]int32, po.SeqLen)) // one full row
	row := pk.Take()[0]
	var schema []fieldSpec
	n := 0
	for _, f := range row.Fields {
		schema = append(schema, fieldSpec{f.Name, f.DType, f.Shape, nil})
		n += len(f.Data)
	}
	return sizeBound(schema, keyLen(row.Key), n)
}

// shardName is a shard key's base name less its extension, as line
// shards' sample keys begin with.
func shardName(key string) string {
	base := path.Base(key)
	return strings.TrimSuffix(base, path.Ext(base))
}

func (r *shardRun) send(c *chunk) error {
	if err := r.sink.WriteFrame(wire.FrameChunk, c.ref.Chunk, c.data); err != nil {
		return &sinkError{fmt.Errorf("sending chunk %s: %w", c.ref, err)}
	}
	r.end.Chunks++
	r.end.Samples += len(c.keys)
	r.end.Bytes += int64(len(c.data))
	r.s.m.chunks.Inc()
	r.s.m.bytes.Add(float64(len(c.data)))
	return nil
}

func (r *shardRun) fail(key, reason string) {
	r.end.AddFailed(key, reason)
	r.log.Debug("sample failed", "key", key, "reason", reason)
}

// finish sends the end frame, saying where the shard was read from.
func (r *shardRun) finish(cache string, s3Bytes, cacheBytes int64) error {
	end := &r.end
	end.Cache, end.S3Bytes, end.CacheBytes = cache, s3Bytes, cacheBytes
	payload, err := encodeEnd(end)
	if err != nil {
		return err
	}
	if err := r.sink.WriteFrame(wire.FrameEnd, 0, payload); err != nil {
		return &sinkError{fmt.Errorf("sending the end of shard %s: %w", r.task.ID(), err)}
	}
	r.s.m.samples.Add(float64(end.Samples))
	r.s.m.failed.Add(float64(end.FailedCount()))
	return nil
}

// encodeEnd encodes end within wire.MaxEndFrameBytes. Reasons are capped
// by AddFailed, but a sample key (a tar member's name) is not: should the
// listed failures not fit, the later ones are counted as omitted instead.
func encodeEnd(end *wire.ShardEnd) ([]byte, error) {
	for {
		payload, err := json.Marshal(end)
		if err != nil {
			return nil, fmt.Errorf("encoding shard end: %w", err)
		}
		if len(payload) <= wire.MaxEndFrameBytes || len(end.Failed) == 0 {
			return payload, nil
		}
		keep := len(end.Failed) / 2
		end.FailedOmitted += len(end.Failed) - keep
		end.Failed = end.Failed[:keep]
	}
}

// sampleReader is what wds.Reader and lines.Reader have in common.
type sampleReader interface {
	Next() (wds.Sample, error)
}

// shardFormat picks the reader by the key's suffix: "tar" for WebDataset
// tar shards, "parquet" for Parquet files, else the member name every sample of a line-oriented shard
// gets ("jsonl", "tsv"). The listing side is objstore.ShardSuffixes.
func shardFormat(key string) (string, error) {
	formats := []string{".tar", ".jsonl", ".tsv", ".parquet"}
	for _, suffix := range formats {
		if strings.HasSuffix(key, suffix) {
			return suffix[1:], nil
		}
	}
	if ext := path.Ext(key); ext != "" {
		return "", fmt.Errorf("shard key %q: unsupported suffix %q: want one of %s", key, ext, strings.Join(formats, ", "))
	}
	return "", fmt.Errorf("shard key %q has no suffix: want one of %s", key, strings.Join(formats, ", "))
}

// readErr remembers the first error other than io.EOF from the object
// body, telling an S3 read failure apart from a corrupt tar.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// isNotFound reports S3's "no such bucket/key" answers, which retrying
// will not change.
func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nsb *types.NoSuchBucket
	if errors.As(err, &nsk) || errors.As(err, &nsb) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NoSuchBucket", "NotFound":
			return true
		}
	}
	return false
}
