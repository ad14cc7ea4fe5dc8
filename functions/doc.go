// Package functions is the function side of Sluice: what a replica started
// by `sluice fn serve` runs for each shard task the dispatcher pushes to it.
//
// Layout, from the bottom up:
//
//   - image: stateless pixel operations on an RGB buffer (decode with a
//     pixel limit, torchvision's RandomResizedCrop rectangle, PIL-style
//     antialiased bilinear resize, flip). Pure functions, no I/O.
//   - pipeline: named per-sample recipes ("imagenet-train",
//     "imagenet-eval") built from image ops, a small registry to look them
//     up by the name a job carries, and the per-sample seed that makes a
//     reprocessed shard byte-identical.
//   - server: the CloudEvents HTTP endpoint. It streams a shard from S3,
//     runs the job's pipeline on every sample, packs outputs into
//     safetensors chunks and publishes them to the job's output stream,
//     replying only once everything is acknowledged.
//
// New ops go in image (or a sibling package for another modality); new
// recipes are one more entry in pipeline's registry.
package functions
