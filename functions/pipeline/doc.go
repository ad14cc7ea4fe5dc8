// Package pipeline turns one WebDataset sample into the tensors a trainer
// receives. A pipeline is an ordered list of registered ops plus where the
// label comes from; a job names a built-in pipeline ("imagenet-train",
// "imagenet-eval", "text-wordpiece", "criteo") or passes a whole spec
// document, and every function replica builds it with Lookup.
//
// # Ops and types
//
// Each op is registered with an OpSpec: a name, a one-line doc, typed
// parameters with defaults and allowed ranges or values, the value types
// it accepts and the one it gives. Values flow between ops as types:
// sample (the raw wds.Sample) -> encoded_image -> image_u8 ->
// tensor_u8_hwc | tensor_f32_chw | tensor_f16_chw for images, sample ->
// text -> tokens for text, sample -> tabular for Criteo lines. A pipeline
// starts from a sample and must end with a tensor type. Ops() lists the
// registry; `sluice fn apply --list` prints it.
//
// # Specs
//
// A spec document is YAML, or JSON when it starts with '{':
//
//	name: my-train
//	label: {member: cls}        # or {field: label} of a JSON member, or none (the default)
//	ops:
//	  - decode
//	  - {op: random_resized_crop, size: 224, scale: [0.08, 1]}
//	  - {op: random_horizontal_flip, p: 0.5}
//	  - {op: color_jitter, brightness: 0.4, contrast: 0.4, saturation: 0.4}
//	  - {op: normalize, dtype: f16}
//
// A spec comes from outside (every shard task carries one), so it is
// read within bounds: a document over MaxSpecBytes (64 KiB) is refused
// unread, and one with YAML aliases (*name) before anything is expanded,
// e.g. `pipeline spec: yaml aliases are not allowed (line 5)`: a few
// hundred bytes of nested aliases expand to millions of values.
//
// Build (and Parse, LoadFile, Lookup) validate a spec before any sample is
// touched and report every problem at once in a *ValidationError, each
// with its position: the document line where YAML gives one, and the op's
// index, e.g. `line 6: ops[2] (color_jitter): brightness 3: want 0..1`.
//
// # Files a spec names
//
// The only files a spec may name are a wordpiece op's vocab and a bpe
// op's tokenizer, and since a spec comes with every task, a replica reads
// them only from the one directory its operator allows (Options.VocabDir, `fn serve
// --vocab-dir`; none by default: builtin only): the name is a file name
// within it, never absolute, never climbing out, never through a symlink
// leading out. What lies outside is never opened, and an error about it
// says the same whether it exists or not. Check validates a spec where
// the replicas' files are not (job submit) and reads nothing.
//
// # Labels
//
// The label is an int64 "label" field read from a member holding an ASCII
// integer (the built-in image pipelines read "cls", as WebDataset
// ImageNet shards have it) or from a field of the JSON member. It is
// optional per sample: a sample without it (a lone JPEG, a folder of
// images without .cls files, a shard of unlabelled images) gets NoLabel,
// -1, so the output keeps one schema and labelled and unlabelled samples
// stack into one chunk; a trainer masks label < 0 or passes
// ignore_index=-1 to its loss. A label that is present but not an integer
// fails its sample.
//
// # Image decoding is lazy
//
// decode only reads the image header. The first op that needs pixels
// decodes them, and a geometric op decodes only the rectangle it reads
// (image.DecodeRegion): random_resized_crop draws its rectangle in the
// full image's coordinates first, so the turbojpeg build can skip rows,
// crop columns and decode at a reduced DCT scale. resize decodes the whole
// image at full scale unless reduced_decode is set, so imagenet-eval stays
// faithful to torchvision's Resize(256) + CenterCrop(224).
//
// # Determinism
//
// All randomness an op uses is drawn, in op order, from one generator
// seeded by the seed Process is handed, which SampleSeed derives from (job
// seed, epoch, sample key): a shard processed twice, on any replica,
// yields byte-identical output. That is what lets a caller that sends a
// task again (its first answer was cut) recognise the chunks it already
// holds.
//
// # Memory
//
// Process is safe for concurrent use. Each call takes a pooled state
// holding three image buffers (the decoded image or region, and two work
// buffers for op outputs), each capped at Options.MaxPixels pixels like
// decoding itself (64 megapixels, 192 MB, by default). Per sample a call
// allocates little beyond its output tensors. A replica's pixel memory is
// thus at most concurrent calls × 3 × 3 × MaxPixels bytes (plus what the
// decoder allocates); for ImageNet-sized JPEGs into 224×224 crops it is
// about 1 MB per call. Buffers grown past 16 MiB by a large image are
// dropped when the call ends rather than kept in the pool.
//
// What decoding takes is bounded across calls too: with
// Options.DecodeBudget (a replica shares one among all its pipelines),
// the first op that decodes reserves image.DecodeCost of the image from
// it, waiting for room (ProcessContext stops waiting when its context
// ends), and gives it back when the call ends. An image whose decoding
// alone is over the budget fails its sample, e.g. `member png: 8000x8000
// image: decoding takes 671.4 MiB, over the 512.0 MiB decode budget`.
package pipeline
