// Package shardcache keeps the raw bytes of shards a function replica read
// from S3, on local disk and in memory, so that a job reads each shard from
// S3 once rather than once per epoch.
//
// A Cache sits between the replica's shard reader and S3. Open asks S3 for
// the object's current ETag (HEAD, no body) when it holds an entry, and
// serves the entry only when the ETags match: a changed object is never
// served stale, it is read again and the old entry removed. On a miss it
// streams the object from S3 as before, and copies the bytes into the
// cache as they pass, when the policy admits them.
//
// Two tiers, each with its own budget: a directory (Config.Dir,
// Config.DiskBytes), which several replicas of one node may share, and a
// per-process memory tier (Config.MemoryBytes) that serves a replica's own
// recent shards without touching the disk. Locality-aware dispatch
// (broker.Rendezvous) sends a shard to the same replica every epoch, so
// the memory tier of that replica is the one that holds it.
//
// # Eviction: why not LRU
//
// Training reads every shard exactly once per epoch, each epoch in a new
// shuffled order. Under that access pattern LRU is the worst choice when
// the dataset does not fit: the entry it evicts is the one read longest
// ago in this epoch, which is as likely as any to be read soon in the next,
// and every miss evicts an entry that would have been a hit, so a cache of
// C bytes on a dataset of D bytes hits far less than C/D of the reads and
// pays a disk write for every miss. The best any policy can do without
// knowing the next epoch's order is to keep a fixed C/D of the dataset.
//
// So the policy (Admit) is: admit while there is room; when full, evict
// only entries that have gone cold (not used for longer than the reuse
// horizon), least recently used first; if that does not free enough, do
// not admit the new shard at all, and stream it from S3 without writing
// it. A too-small cache then keeps a stable C/D of the dataset and costs
// nothing on the other reads: it is never worse than no cache. Cold
// entries are those of datasets no job reads any more: the horizon is
// twice the longest reuse interval seen (a shard comes back within two
// epochs), but never less than Config.IdleHorizon (default one hour), so
// that the entries of a running job are never taken for cold, not even
// early in an epoch, when the reuse seen so far understates its length.
//
// # Safety
//
// An entry is written to a temporary name in the same directory and
// renamed into place only once the whole object passed and its length
// matched; a replica killed mid-write leaves a temporary file that is never
// served and is removed once stale. Each entry carries the object's ETag,
// its length and a CRC-32C of the bytes, checked as they are served: a
// damaged entry fails the read (the task is retried) and is removed.
// Replicas sharing a directory coordinate through the file system only:
// rename is atomic, an entry removed while another replica reads it stays
// readable until closed, and the last use is the file's modification time.
// The disk budget is checked against the whole directory, so concurrent
// writers may overshoot it by the shards they are writing at that moment.
//
// One read fills an entry at a time. A read that misses takes the entry
// name's fill: within the process a map of fills in progress, across the
// processes sharing the directory an advisory lock (flock) on a lock file
// per name, taken without blocking. Another read of the same shard that
// misses meanwhile waits for that fill to end (woken in-process, polling
// the lock every 15 ms across processes), then serves the entry, or reads
// S3 as a miss does when none came (the fill aborted, was not admitted,
// or the object changed). The wait is bounded by Config.FillWait (30 s): a
// fill streams at its reader's pace, and a stalled reader must not stall
// the others, so past it the waiter reads S3 without caching (bypass
// reason fill_wait); ctx ends a wait at once. The kernel drops a killed
// filler's lock, so a crashed replica never blocks the others. A filler
// removes its lock file as it ends; one a killed filler left is removed
// once stale, like temporary files. Lock files are never entries.
//
// A directory that cannot be created or written, or a full disk, degrades
// the cache to reading from S3 with a logged warning; it never fails a
// task.
//
// A cache meant to cache that does not keep a shard says why, once per
// job and reason, in a warning naming the job (Bypass: the object has no
// ETag, as files dropped into a gateway's directory have; no tier has
// room; the directory cannot be used; another read's fill outlasted
// Config.FillWait), and counts every such read in
// sluice_cache_bypass_total{reason}: a dataset read from S3 every epoch
// is never silent.
package shardcache
