// Package jpeg is a fork of the Go standard library's JPEG decoder
// (image/jpeg, Go 1.26; BSD licence in LICENSE, original copyright notices
// kept in each file) for Sluice's pure-Go build, changed to do less work
// when only part of an image is wanted, as a random crop does:
//
//   - only the 8x8 blocks that cover a region are dequantized and inverse
//     transformed (the entropy-coded data must still be read in order);
//   - a sequential JPEG's data is read no further than the region's last
//     row of blocks;
//   - blocks can be reconstructed at 1/2, 1/4 or 1/8 scale with reduced
//     inverse DCTs (scaled.go), as libjpeg's scaled decoding does;
//   - pixel and coefficient memory is reused from one image to the next.
//
// It also decodes what libjpeg-turbo does and the standard library does
// not:
//
//   - arithmetic-coded JPEGs, sequential and progressive (SOF9, SOF10,
//     DAC), with arith.go, a port of libjpeg-turbo's jdarith.c;
//   - restart intervals in a scan of one component of several, where each
//     block is an MCU (the standard library counted the interleaved MCUs,
//     so progressive 4:2:0 files with restart markers failed);
//   - sequential Huffman scans whose tables were never defined, as in
//     Motion-JPEG frames, with the standard tables of section K.3.
//
// Lossless, hierarchical and 12-bit JPEGs get an error naming them.
// Huffman decoding, markers, progressive scans and colour models are
// otherwise the standard library's code; the encoder, the
// image.RegisterFormat hook and the io.Reader entry points are gone
// (Decoder.Decode takes bytes).
// The image package calls it; nothing else should.
package jpeg
