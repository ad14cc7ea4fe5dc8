// Package pipeline turns one WebDataset sample into the tensors a trainer
// receives. A Pipeline is a named, stateless recipe (decode, augment,
// label); a job names one, and every function replica looks it up in the
// registry here, so adding a recipe is one more registry entry.
//
// All randomness a pipeline uses comes from the seed it is handed, which
// SampleSeed derives from (job seed, epoch, sample key): a shard processed
// twice, on any replica, yields byte-identical output. That is what lets a
// redelivered task's chunks be deduplicated downstream.
package pipeline
