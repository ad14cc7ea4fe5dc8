// Package functions is the function side of Sluice: what a replica started
// by `sluice fn serve` runs for each shard task the dispatcher pushes to it.
//
// Layout, from the bottom up:
//
//   - image, text, tabular: stateless operations of one modality, pure
//     functions without I/O: image decoding (pure Go, or libjpeg-turbo with
//     region-of-interest and DCT-scaled decoding under the `turbojpeg`
//     build tag), torchvision's crops, Pillow-exact resizing; BERT
//     WordPiece tokenization; Criteo TSV parsing and feature hashing.
//   - pipeline: the op registry (each op with a spec of its parameters,
//     defaults and ranges, and its input and output types), pipelines
//     declared in YAML or JSON or picked by a built-in name and validated
//     before any work starts, and the per-sample seed that makes a
//     reprocessed shard byte-identical.
//   - shardcache: the raw bytes of shards a replica read, on disk and in
//     memory, checked against the object's ETag, so that a job reads its
//     dataset from S3 about once rather than once per epoch; and the
//     model of what that saves (`sluice plan`).
//   - server: the CloudEvents HTTP endpoint. It streams a shard from S3,
//     runs the job's pipeline on every sample, packs outputs into
//     safetensors chunks and publishes them to the job's output stream,
//     replying only once everything is acknowledged.
//
// A new op is one registry entry in pipeline over a function in its
// modality's package; a new built-in pipeline is one more Definition.
package functions
