// Package tabular parses recommendation-model input: Criteo-style TSV
// lines (the Criteo 1TB Click Logs and Kaggle Display Advertising layout,
// as DLRM reads them) into a label, 13 dense float32 features and 26
// hashed categorical int64 features.
//
// # Line format
//
// 40 tab-separated columns, a trailing "\n" or "\r\n" allowed:
//
//	column 1      label   0 or 1
//	columns 2-14  I1-I13  integers (base 10, optional sign), or empty = missing
//	columns 15-40 C1-C26  categorical values (usually 8 hex digits), or empty = missing
//
// # Dense features
//
// A missing value becomes DenseFill, as is (it is not transformed). A
// present value x becomes log(1 + max(x, 0)) with Log1p (negatives clamped
// to 0 first, as DLRM's reference preprocessing does; Criteo's I2 has
// them), or float32(x) without it. The log is computed in float64 and then
// rounded to float32.
//
// # Categorical features: the exact hashing rule
//
// The index of categorical column Cj (j = 1..26) is
//
//	FNV-1a-64(raw) mod Buckets[j-1]
//
// where raw is the column's bytes exactly as they appear in the line (no
// case folding, no hex decoding, no trimming) and FNV-1a-64 is the 64-bit
// Fowler-Noll-Vo 1a hash (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3, arithmetic mod 2^64). A missing value is the empty byte
// string, so it hashes to 0xcbf29ce484222325 mod Buckets[j-1] — one fixed
// index per column, like any other value. Indexes are in [0, Buckets[j-1]).
//
// This Python reproduces the package bit for bit (parse one line, as
// bytes, without its newline):
//
//	import math
//
//	def fnv1a64(b: bytes) -> int:
//	    h = 0xCBF29CE484222325
//	    for x in b:
//	        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
//	    return h
//
//	def parse_criteo(line: bytes, buckets, log1p=True, dense_fill=0.0):
//	    cols = line.split(b"\t")
//	    assert len(cols) == 40
//	    label = int(cols[0])
//	    dense = [dense_fill if c == b"" else
//	             (math.log1p(max(int(c), 0)) if log1p else float(int(c)))
//	             for c in cols[1:14]]                  # then numpy.float32(...)
//	    sparse = [fnv1a64(c) % buckets[j] for j, c in enumerate(cols[14:40])]
//	    return label, dense, sparse
//
// For example FNV-1a-64(b"68fd1e64") = 0x1ae7327a0f5691dd, which is index
// 430557 with 2^20 buckets, and a missing value's index with 2^20 buckets
// is 140069.
package tabular
