package parquet

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// pageChecker walks a column chunk's pages before the library decodes
// them: every header within bounds, every page within the chunk, every
// compressed page decompressing to no more than the page limit, every
// count within the row group's rows. The library trusts each of these to
// size what it allocates.
type pageChecker struct {
	limits Limits
	zstd   *zstd.Decoder
}

// headerBudget bounds what one page header's lists decode to (statistics
// and the like: a page header has no long lists).
const headerBudget = 1 << 20

func (pc *pageChecker) chunk(data []byte, codec format.CompressionCodec, rows int64) error {
	switch codec {
	case format.Uncompressed, format.Snappy, format.Gzip, format.Zstd:
	default:
		return fmt.Errorf("compression %s is not supported (want none, snappy, gzip or zstd)", codec)
	}
	var values int64 // data pages' values so far
	proto := &thrift.CompactProtocol{}
	for off, page := 0, 0; off < len(data); page++ {
		if int64(page) > rows+1 {
			// A data page holds a row at least, and there is one
			// dictionary: more pages are empty ones, each a loop of the
			// decoder for nothing.
			return fmt.Errorf("more than %d pages in a row group of %d rows", rows+1, rows)
		}
		n, err := checkThrift(data[off:], headerBudget)
		if err != nil {
			return fmt.Errorf("page %d header: %w", page, err)
		}
		// Decoded in place (thrift.Unmarshal would copy it): the header's
		// statistics may hold whole values, and only its counts are kept.
		var h format.PageHeader
		if err := thrift.NewDecoder(proto.NewReaderFromBytes(data[off : off+n])).Decode(&h); err != nil {
			return fmt.Errorf("page %d header: %w", page, err)
		}
		off += n
		body := int64(h.CompressedPageSize)
		switch {
		case body < 0 || body > int64(len(data)-off):
			return fmt.Errorf("page %d of %d bytes, %d left in the chunk", page, body, len(data)-off)
		case h.UncompressedPageSize < 0 || int64(h.UncompressedPageSize) > pc.limits.MaxPageBytes:
			return fmt.Errorf("page %d of %d bytes uncompressed, over the %d-byte page limit", page, h.UncompressedPageSize, pc.limits.MaxPageBytes)
		}
		b := data[off : off+int(body)]
		off += int(body)
		compressed := b
		switch h.Type {
		case format.DictionaryPage:
			if !h.DictionaryPageHeader.Valid {
				return fmt.Errorf("page %d: dictionary page without its header", page)
			}
			if nv := h.DictionaryPageHeader.V.NumValues; nv < 0 || nv > h.UncompressedPageSize {
				return fmt.Errorf("page %d: dictionary of %d values in %d bytes", page, nv, h.UncompressedPageSize)
			}
		case format.DataPage:
			if !h.DataPageHeader.Valid {
				return fmt.Errorf("page %d: data page without its header", page)
			}
			values += int64(max(h.DataPageHeader.V.NumValues, -1))
			if h.DataPageHeader.V.NumValues < 0 || values > rows {
				return fmt.Errorf("page %d: %d values so far in a row group of %d rows", page, values, rows)
			}
		case format.DataPageV2:
			if !h.DataPageHeaderV2.Valid {
				return fmt.Errorf("page %d: data page without its header", page)
			}
			v := &h.DataPageHeaderV2.V
			values += int64(max(v.NumValues, -1))
			levels := int64(v.RepetitionLevelsByteLength) + int64(v.DefinitionLevelsByteLength)
			switch {
			case v.NumValues < 0 || v.NumRows < 0 || v.NumNulls < 0 || values > rows:
				return fmt.Errorf("page %d: %d values so far in a row group of %d rows", page, values, rows)
			case v.RepetitionLevelsByteLength < 0 || v.DefinitionLevelsByteLength < 0 || levels > body:
				return fmt.Errorf("page %d: levels of %d bytes in a page of %d", page, levels, body)
			}
			compressed = b[levels:]
			if v.IsCompressed.Valid && !v.IsCompressed.V {
				continue
			}
		default:
			continue // index pages and the like are skipped by the decoder
		}
		if err := pc.decompressed(codec, compressed); err != nil {
			return fmt.Errorf("page %d: %w", page, err)
		}
	}
	return nil
}

// decompressed checks that b decompresses within the page limit: the
// decoders the library uses grow their output as far as the data says.
func (pc *pageChecker) decompressed(codec format.CompressionCodec, b []byte) error {
	limit := pc.limits.MaxPageBytes
	var n int64
	var err error
	switch codec {
	case format.Snappy:
		var d int
		d, err = snappy.DecodedLen(b)
		n = int64(d)
	case format.Gzip:
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(b)); err == nil {
			n, err = io.Copy(io.Discard, io.LimitReader(zr, limit+1))
		}
	case format.Zstd:
		if pc.zstd == nil {
			if pc.zstd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true)); err != nil {
				return err
			}
		}
		if err = pc.zstd.Reset(bytes.NewReader(b)); err == nil {
			n, err = io.Copy(io.Discard, io.LimitReader(pc.zstd, limit+1))
		}
	default:
		return nil
	}
	switch {
	case err != nil:
		return fmt.Errorf("decompressing (%s): %w", codec, err)
	case n > limit:
		return fmt.Errorf("decompresses to over the %d-byte page limit", limit)
	}
	return nil
}

// Close frees the decompressor the checks hold.
func (pc *pageChecker) close() {
	if pc.zstd != nil {
		pc.zstd.Close()
	}
}
