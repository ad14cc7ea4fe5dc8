// Package assembly is a reader's batch assembly, the floor below its
// positions and ranks: chunks in (safetensors files of samples, their
// Schema checked), batches out (Batch, ReadyBatch) in the order the
// schedule defines, each source's share mixed (mix.go), and what was
// handed out recorded as a Position that a restarted or resumed reader
// restores (Assembler.Snapshot, Restore; ReplaySet and Carry for a resume's
// rewind). RecordedShards remembers which shards a written position
// completes. An Assembler is plain state: no lock and no I/O (its owner,
// the reader's state, is called under the reader's lock), but for
// RecordedShards, whose lock is a leaf of the agent's lock order.
package assembly
