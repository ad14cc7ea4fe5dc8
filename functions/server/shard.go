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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/lines"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/wds"
	"github.com/sluice-project/sluice/wire"
)

// Errors ProcessShard wraps for failures that retrying cannot fix.
var (
	// ErrInvalidTask: the task cannot be processed as given (bad field,
	// unknown pipeline, chunks that cannot fit in a NATS message).
	ErrInvalidTask = errors.New("invalid shard task")
	// ErrShardNotFound: the shard's bucket or object does not exist.
	ErrShardNotFound = errors.New("shard not found")
	// ErrNoOutputStream: no stream takes the task's output subject. The
	// job was cancelled or has finished (its output stream is deleted
	// then), or was never submitted; its tasks can only be dropped.
	ErrNoOutputStream = errors.New("no output stream")
)

// headerRoom is what a chunk message's headers and subject may take on
// top of its payload, when checking chunks against the NATS max payload.
const headerRoom = 4 << 10

// ProcessShard preprocesses one shard and returns once its chunks and
// shard-end message are acknowledged by JetStream. Bad samples do not fail
// the shard: they are listed in the result. A returned error wraps
// ErrInvalidTask, ErrShardNotFound or ErrNoOutputStream when retrying
// cannot help; any other error is transient. ProcessShard does no
// admission control (Handler does).
func (s *Server) ProcessShard(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error) {
	start := time.Now()
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()
	log := s.log.With("task", task.ID(), "shard_key", task.Key)

	res, err := s.processShard(ctx, task, log)

	outcome := outcomeOK
	switch {
	case errors.Is(err, ErrInvalidTask):
		outcome = outcomeInvalid
	case errors.Is(err, ErrShardNotFound):
		outcome = outcomeNotFound
	case errors.Is(err, ErrNoOutputStream):
		outcome = outcomeNoOutput
	case err != nil:
		outcome = outcomeError
	}
	s.m.shards.WithLabelValues(outcome).Inc()
	s.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		log.Warn("shard failed", "outcome", outcome, "err", err, "duration", time.Since(start))
		return wire.ShardResult{}, err
	}
	log.Info("shard done", "samples", res.Samples, "failed", len(res.Failed), "chunks", res.Chunks,
		"bytes", res.Bytes, "duration", time.Since(start))
	return res, nil
}

func (s *Server) processShard(ctx context.Context, task wire.ShardTask, log *slog.Logger) (wire.ShardResult, error) {
	res := wire.ShardResult{Task: task.ID()}
	if err := task.Validate(); err != nil {
		return res, fmt.Errorf("%w: %w", ErrInvalidTask, err)
	}
	p, err := s.pipelines.get(task.Pipeline)
	if err != nil {
		return res, fmt.Errorf("%w: task %s: %w", ErrInvalidTask, task.ID(), err)
	}
	if maxPayload := s.js.Conn().MaxPayload(); int64(task.ChunkMaxBytes)+headerRoom > maxPayload {
		return res, fmt.Errorf("%w: task %s: chunk max bytes %d does not fit the NATS server's max payload %d",
			ErrInvalidTask, task.ID(), task.ChunkMaxBytes, maxPayload)
	}

	format, err := shardFormat(task.Key)
	if err != nil {
		return res, fmt.Errorf("%w: task %s: %w", ErrInvalidTask, task.ID(), err)
	}

	// The shard cache reads from S3 unless it holds the object's current
	// version; it is a plain S3 read when no cache is configured.
	obj, err := s.cache.Open(ctx, task.Bucket, task.Key)
	if err != nil {
		if isNotFound(err) {
			return res, fmt.Errorf("%w: fetching shard s3://%s/%s: %w", ErrShardNotFound, task.Bucket, task.Key, objstore.Explain(err))
		}
		return res, fmt.Errorf("fetching shard s3://%s/%s: %w", task.Bucket, task.Key, objstore.Explain(err))
	}
	defer obj.Close()
	body := &readErr{r: obj}
	var rd sampleReader = wds.NewReader(body, s.cfg.MaxMemberBytes)
	if format != "tar" {
		rd = lines.NewReader(body, task.Key, format, int(min(s.cfg.MaxMemberBytes, math.MaxInt32)))
	}
	ch := newChunker(task)
	var acks []jetstream.PubAckFuture

	publish := func(c *chunk) error {
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: task.OutputSubject, Header: outputHeader(c.ref, task), Data: c.data})
		if err != nil {
			return fmt.Errorf("publishing chunk %s: %w", c.ref.MsgID(), err)
		}
		acks = append(acks, f)
		res.Chunks++
		res.Samples += len(c.keys)
		res.Bytes += int64(len(c.data))
		return nil
	}
	fail := func(key, reason string) {
		res.Failed = append(res.Failed, wire.FailedSample{Key: key, Reason: reason})
		log.Debug("sample failed", "key", key, "reason", reason)
	}

	for {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("processing shard %s: %w", task.ID(), err)
		}
		sample, err := rd.Next()
		// The tar reader reports a broken stream as a failed sample; when
		// the break came from S3 rather than the object's bytes, it is
		// transient, and the rest of the shard must not be given up.
		if body.err != nil {
			return res, fmt.Errorf("reading shard s3://%s/%s: %w", task.Bucket, task.Key, body.err)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			fail(se.Key, se.Reason)
			continue
		}
		if err != nil {
			return res, fmt.Errorf("reading shard s3://%s/%s: %w", task.Bucket, task.Key, err)
		}
		out, err := p.Process(sample, pipeline.SampleSeed(task.Seed, task.Epoch, sample.Key))
		if err != nil {
			fail(sample.Key, err.Error())
			continue
		}
		out.Key = sample.Key
		full, err := ch.add(out)
		if err != nil {
			fail(sample.Key, err.Error())
			continue
		}
		if full != nil {
			if err := publish(full); err != nil {
				return res, err
			}
		}
	}
	last, err := ch.close()
	if err != nil {
		return res, err
	}
	if last != nil {
		if err := publish(last); err != nil {
			return res, err
		}
	}
	dups, err := s.waitAcks(ctx, acks)
	if err != nil {
		return res, s.outputGone(ctx, task, fmt.Errorf("publishing shard %s: %w", task.ID(), err))
	}
	if dups > 0 {
		log.Debug("stream dropped duplicate chunks (a redelivered task)", "duplicates", dups)
	}

	end, err := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard,
		Chunks: res.Chunks, Samples: res.Samples, Failed: res.Failed})
	if err != nil {
		return res, fmt.Errorf("encoding shard end: %w", err)
	}
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: -1}
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: task.OutputSubject, Header: outputHeader(ref, task), Data: end}); err != nil {
		return res, s.outputGone(ctx, task, fmt.Errorf("publishing shard end %s: %w", ref.MsgID(), err))
	}
	// Closing completes the cache entry a miss was writing; only then are
	// the bytes read from S3 all counted.
	obj.Close()
	res.Cache, res.S3Bytes, res.CacheBytes = string(obj.Outcome()), obj.S3Bytes(), obj.CacheBytes()
	s.m.samples.Add(float64(res.Samples))
	s.m.failed.Add(float64(len(res.Failed)))
	s.m.chunks.Add(float64(res.Chunks))
	s.m.bytes.Add(float64(res.Bytes))
	return res, nil
}

// outputGone makes a publish error ErrNoOutputStream when JetStream says
// no stream takes the task's output subject. "No response from stream"
// alone is not enough: a stream between leaders, or a server restarting,
// answers that too, and those are worth a retry.
func (s *Server) outputGone(ctx context.Context, task wire.ShardTask, err error) error {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return err
	}
	if _, lookupErr := s.js.StreamNameBySubject(ctx, task.OutputSubject); !errors.Is(lookupErr, jetstream.ErrStreamNotFound) {
		return err
	}
	return fmt.Errorf("%w: task %s: no stream takes subject %s, so job %s was cancelled, has finished or was never submitted",
		ErrNoOutputStream, task.ID(), task.OutputSubject, task.Job)
}

// sampleReader is what wds.Reader and lines.Reader have in common.
type sampleReader interface {
	Next() (wds.Sample, error)
}

// shardFormat picks the reader by the key's suffix: "tar" for WebDataset
// tar shards, else the member name every sample of a line-oriented shard
// gets ("jsonl", "tsv"). The listing side is objstore.ShardSuffixes.
func shardFormat(key string) (string, error) {
	formats := []string{".tar", ".jsonl", ".tsv"}
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

// waitAcks waits for every chunk's PubAck and counts the duplicates.
func (s *Server) waitAcks(ctx context.Context, acks []jetstream.PubAckFuture) (dups int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout)
	defer cancel()
	for i, f := range acks {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dups++
			}
		case err := <-f.Err():
			return dups, fmt.Errorf("chunk %d of %d not acknowledged: %w", i, len(acks), err)
		case <-ctx.Done():
			return dups, fmt.Errorf("waiting for acknowledgement of chunk %d of %d: %w", i, len(acks), ctx.Err())
		}
	}
	return dups, nil
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

// outputHeader is ref's header; a replay task's messages get their own
// Nats-Msg-Id (wire.ShardTask.Replay), or the output stream's duplicate
// window would drop the re-produced chunks the reader needs.
func outputHeader(ref wire.ChunkRef, task wire.ShardTask) nats.Header {
	h := ref.Header()
	if task.Replay != "" {
		h.Set(nats.MsgIdHdr, ref.MsgID()+".r"+task.Replay)
	}
	return h
}
