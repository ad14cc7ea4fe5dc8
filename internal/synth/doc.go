// Package synth generates seeded synthetic datasets as WebDataset tar shards
// and uploads them to S3: what `sluice demo` and the tests preprocess. The
// same seed gives the same bytes.
package synth
