// Package wds reads and writes WebDataset-style tar shards: consecutive tar
// members that share a key (the member path up to the first dot of its base
// name) form one sample, e.g. "000017.jpg" and "000017.cls".
//
// A shard comes from outside and its headers say how much to allocate, so
// the reader holds each sample to Limits: one member's size
// (DefaultMaxMemberBytes, 64 MiB), the sample's members together
// (DefaultMaxSampleBytes, 128 MiB) and their count
// (DefaultMaxSampleMembers, 64). It refuses GNU sparse members (the old
// GNU 'S' type and PAX GNU.sparse.* records), whose headers claim sizes a
// few bytes of tar do not hold. A sample over a limit or with a sparse
// member is a corrupt sample: Next reports it as a *SampleError naming
// the reason, drops what it read of it, skips the rest unread, and goes
// on with the next.
package wds
