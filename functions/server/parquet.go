package server

import (
	"context"
	"errors"
	"fmt"

	parquetfmt "github.com/sluice-project/sluice/format/parquet"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/objstore"
)

// parquet processes a Parquet shard: its footer (in the file's last
// TailBytes, the first GET), then the task's columns' chunks, row group by
// row group, each a ranged GET. It does not go
// through the shard cache, which keeps whole objects: caching a file would
// read the columns the job does not want, which is what reading by column
// saves. Each epoch reads the wanted chunks from S3 again; the end says
// "bypass" with the bytes read. A file that cannot be read as Parquet, or
// lacks a column the task names, is one failed sample named after the
// file, with the reason.
func (r *shardRun) parquet(ctx context.Context, p pipeline.Pipeline, pk *pipeline.Packer) error {
	task := r.task
	src, err := objstore.OpenRange(ctx, r.s.s3, task.Bucket, task.Key, parquetfmt.TailBytes)
	if err != nil {
		if isNotFound(err) {
			return fmt.Errorf("%w: fetching shard s3://%s/%s: %w", ErrShardNotFound, task.Bucket, task.Key, objstore.Explain(err))
		}
		return fmt.Errorf("fetching shard s3://%s/%s: %w", task.Bucket, task.Key, objstore.Explain(err))
	}
	rd, err := parquetfmt.Open(src, src.Size(), task.Key, task.Columns.Map(), r.s.cfg.Parquet)
	var se *wds.SampleError
	switch {
	case errors.As(err, &se):
		r.fail(se.Key, se.Reason)
	case err != nil:
		return fmt.Errorf("reading shard s3://%s/%s: %w", task.Bucket, task.Key, err)
	default:
		defer rd.Close()
		if err := r.process(ctx, p, pk, rd, &readErr{}); err != nil {
			return err
		}
	}
	return r.finish(string(shardcache.OutcomeBypass), src.Bytes(), 0)
}
