package hostile

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
)

// PNG16 is a w x h 16-bit RGB PNG of one flat colour. Its rows are
// written straight into the compressor, so making it takes no w x h
// buffer, and it compresses about a thousandfold: 8000 x 8000 is under
// 500 KB, yet decoding it takes 8 bytes a pixel (Go's png decoder gives
// an RGBA64 image).
func PNG16(w, h int) []byte {
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 16, 2 // bit depth, colour type RGB; no interlace
	writeChunk(&out, "IHDR", ihdr)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	row := make([]byte, 1+6*w) // filter type 0 (none), then the pixels
	for i := 1; i < len(row); i += 2 {
		row[i] = 0x80 // a mid grey
	}
	for range h {
		zw.Write(row)
	}
	zw.Close()
	writeChunk(&out, "IDAT", z.Bytes())
	writeChunk(&out, "IEND", nil)
	return out.Bytes()
}

func writeChunk(out *bytes.Buffer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	out.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	out.WriteString(typ)
	out.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	out.Write(n[:])
}
