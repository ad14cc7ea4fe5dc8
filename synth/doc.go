// Package synth generates seeded synthetic datasets and uploads them to S3:
// what `sluice demo` and the tests preprocess. Images are WebDataset tar
// shards of JPEGs; text is tar shards (.txt + .cls) or JSON Lines; tabular
// data is Criteo-like TSV. The same options and seed give the same bytes.
package synth
