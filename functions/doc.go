// Package functions is the function side of Sluice: what a replica started
// by `sluice fn serve` runs for each shard task an agent sends it.
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
//     safetensors chunks and answers the task with them, a frame per
//     chunk sent as soon as it is ready, then the shard's end.
//
// A new op is one registry entry in pipeline over a function in its
// modality's package; a new built-in pipeline is one more Definition.
package functions
