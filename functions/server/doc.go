// Package server is the function replica's HTTP side: a CloudEvents
// endpoint that takes one shard task per request (binary mode: POST /,
// Ce-* headers, Content-Type application/json, the wire.ShardTask as the
// body; structured mode is accepted too), streams the shard from S3
// through the task's pipeline, and answers with the shard's output in the
// response body. A replica needs S3 and nothing else.
//
// The response is a stream of frames, Content-Type
// wire.ShardStreamMediaType (wire/frame.go holds the format): a chunk
// frame for each safetensors chunk, in index order from 0, written and
// flushed as soon as the chunker closes it so that the caller can hand
// out samples before the shard is finished; then one end frame, a JSON
// wire.ShardEnd (chunks, samples, the failed samples within
// wire.MaxFailedListed, bytes, and where the shard's bytes came from), or,
// if the shard fails once its output has started, one error frame, a JSON
// wire.ShardError. The 200 is held back until the first frame is ready,
// so a shard that fails before it has any output (a missing object, an
// S3 error before the first chunk) is answered with a status instead.
//
// Output is a response, not a publication somewhere, because it is
// deterministic: per-sample seeds and chunk boundaries that depend only on
// the samples give the same chunks, index for index and byte for byte,
// each time a shard is processed. A body cut before its end or error frame
// (a killed replica, a lost connection) therefore just means "shard
// incomplete": the caller sends the task again, to this replica or
// another, and recognises the chunks it already holds by their index. Only
// the end frame makes a shard complete. A client that goes away mid-shard
// (its connection closes, or it stops reading for
// Config.FrameWriteTimeout) frees the processing slot at the next sample.
//
// The event's body is read (within the HTTP server's read timeout,
// internal/httpserve) and checked before a processing slot is taken, so a
// client that sends its body slowly or never holds no slot.
//
// Status codes are the contract with the caller:
//
//	200 the frame stream (also when some samples failed: the end lists
//	    them); it may still end in an error frame, see above
//	400 malformed event or invalid task (bad field, unknown pipeline,
//	    unsupported shard suffix): permanent, do not retry
//	401 (from `fn serve`'s token check, internal/bearer, in front of the
//	    Handler) no or a wrong bearer token: the caller's configuration
//	404 the shard's bucket or object does not exist: permanent
//	408 the body did not come within the server's read timeout
//	413 event body over Config.MaxBodyBytes: permanent
//	415 Content-Type neither application/json (binary mode) nor
//	    application/cloudevents+json (structured mode with JSON data):
//	    do not retry
//	429 at Config.Concurrency: retry later or elsewhere (Retry-After)
//	503 draining (scale-down): retry elsewhere (Retry-After)
//	500 transient failure before any output (an S3 read error): retry
//
// The permanent ones (400, 404, 413, 415) carry wire.HeaderTaskRejected:
// true, so that a caller can tell the function's verdict on a task from a
// 404 of whatever else listens at a dead replica's address.
//
// An error frame's Permanent says the same of a failure after the 200
// (true only for what would have been a 400 or 404).
package server
