// Package server is the function replica's HTTP side: a CloudEvents
// endpoint that takes one shard task per request, streams the shard from
// S3 through the job's pipeline, publishes the output as safetensors chunks
// on the job's JetStream stream and replies with a shard result.
//
// The reply is the commit point of Sluice's exactly-once delivery: 200 is
// sent only after every chunk and the shard-end message are acknowledged
// by JetStream, so a dispatcher that acks the task on 200 never loses
// output. Anything short of that is a non-2xx reply and the task is
// redelivered; reprocessing is deterministic (per-sample seeds, fixed chunk
// boundaries, Nats-Msg-Id per chunk), so the stream's duplicate window drops
// what was already published.
//
// Status codes are the contract with the dispatcher:
//
//	200 result event (also when some samples failed: they are listed)
//	400 malformed event or invalid task: permanent, the task is terminated
//	404 the shard object does not exist, or no stream takes the task's
//	    output subject (the job was cancelled or has finished): permanent
//	413 event body over Config.MaxBodyBytes: permanent
//	415 Content-Type neither application/json (binary mode) nor
//	    application/cloudevents+json (structured mode with JSON data):
//	    do not retry (the dispatcher never sends one)
//	429 at Config.Concurrency: retry later
//	503 draining (scale-down): retry elsewhere
//	500 transient failure (S3 read, NATS publish): retry
package server
