// Package parquet reads Parquet files as a stream of samples, the way wds
// reads tar shards and lines reads JSONL: one sample per row, its members
// taken from named columns (a text column as "txt", an image's bytes as
// "jpg", a label as "cls"), so that pipelines written for WebDataset read
// Parquet unchanged.
//
// Only the named columns are read: Open reads the footer (the file's last
// bytes), then each row group's column chunks of those columns, one ReadAt
// each, from an io.ReaderAt that may be ranged GETs on S3. Other columns'
// bytes are never asked for.
//
// A file comes from outside, and its footer and page headers declare sizes
// the decoder would otherwise trust. Everything is bounded (Limits): the
// footer's size and what its lists decode to, a row group's rows, one
// column chunk and the projected chunks of a row group together, one page
// uncompressed; compressed pages are checked to decompress within their
// declared size before the decoder sees them. What is over a limit, or
// corrupt, is a *wds.SampleError naming the file, the row group and the
// column; the library's panics are recovered into the same.
//
// A row's sample key is "<file base name without .parquet>/<row number>",
// the row number 0-based over the whole file and zero-padded to 8 digits,
// as in package lines.
package parquet
