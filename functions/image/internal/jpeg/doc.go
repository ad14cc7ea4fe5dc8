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
// Huffman decoding, markers, progressive scans and colour models are the
// standard library's code, unchanged; the encoder, the image.RegisterFormat
// hook and the io.Reader entry points are gone (Decoder.Decode takes bytes).
// The image package calls it; nothing else should.
package jpeg
