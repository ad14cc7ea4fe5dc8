// Package lines reads line-oriented shards (JSON Lines, TSV) as a stream of
// samples, one per non-empty line, the way wds reads tar shards: the
// function server treats both alike.
//
// A line's sample key is "<shard base name without extension>/<line
// number>", the line number 0-based and zero-padded to 8 digits
// ("part-00017/00000042"). Empty lines produce no sample but are counted,
// so keys do not move when blank lines are added or removed elsewhere, and
// the same key always means the same line of the same shard.
package lines
