// Package wds reads and writes WebDataset-style tar shards: consecutive tar
// members that share a key (the member path up to the first dot of its base
// name) form one sample, e.g. "000017.jpg" and "000017.cls".
package wds
