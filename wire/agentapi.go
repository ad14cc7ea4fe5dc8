package wire

// The trainer agent's HTTP API (traineragent.Reader.Handler), which the
// Python client (clients/python/sluice) speaks: paths, query parameters,
// headers, and the safetensors metadata of a served batch. A test keeps
// the client's strings equal to these.
const (
	AgentPathBatch  = "/v1/batch"  // GET: a rank's part of the next step
	AgentPathResume = "/v1/resume" // POST: rewind the reader to a state
	AgentPathStats  = "/v1/stats"  // GET: the reader's Stats as JSON

	// Query parameters of GET /v1/batch (and world_size of POST /v1/resume).
	AgentParamRank      = "rank"
	AgentParamWorldSize = "world_size"
	AgentParamDropLast  = "drop_last"
	// AgentParamGeneration, on POST /v1/resume, names the trainer's run:
	// every rank of one launch sends the same, each launch another (the
	// client derives it from torchrun's run id and restart count, or
	// rank 0 broadcasts one). Optional; without it the agent tells a new
	// launch from a late rank by which ranks resumed already.
	AgentParamGeneration = "generation"
	AgentParamSteps      = "steps"     // the client's steps so far
	AgentParamWaitS      = "wait_s"    // its seconds waiting for data
	AgentParamComputeS   = "compute_s" // its seconds computing

	AgentHeaderEpoch = "Sluice-Epoch"
	AgentHeaderStep  = "Sluice-Step"
	// AgentHeaderEnd says why GET /v1/batch answered 410: AgentEndDelivered
	// or AgentEndEnded.
	AgentHeaderEnd    = "Sluice-End"
	AgentEndDelivered = "delivered" // the rank got every step of every epoch
	AgentEndEnded     = "ended"     // the job was cancelled, failed or deleted
)

// Safetensors metadata keys of a batch the agent serves.
const (
	MetaBatchJob   = "job"
	MetaBatchEpoch = "epoch"
	MetaBatchKeys  = "keys" // JSON array of sample keys in row order
	// MetaBatchSources, in a mixed job, is the JSON array of each row's
	// source: its index in the job spec's sources, in row order.
	MetaBatchSources = "sources"

	MetaBatchReader    = "reader"     // the reader the agent is (for State.Reader)
	MetaBatchStep      = "step"       // the global step's index within the epoch
	MetaBatchRank      = "rank"       // the rank the part is for
	MetaBatchWorldSize = "world_size" // ranks the step was split over
	MetaBatchLastStep  = "last_step"  // "true" on the epoch's last step
	// MetaBatchPosition is the JSON of the reader's position once the
	// whole step was handed out: a trainer keeps the last one its loop
	// took in its checkpoint (State.Position) and resumes from it.
	MetaBatchPosition = "position"
	// MetaBatchEpochFailed, on an epoch's last step, counts the epoch's
	// samples that are not in it (failed preprocessing, or a shard that
	// failed for good; GET /v1/stats lists them): "0" when none.
	MetaBatchEpochFailed = "epoch_failed"
)
