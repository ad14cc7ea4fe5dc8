// Package image holds Sluice's stateless image operations on an 8-bit RGB
// buffer laid out height × width × channel (HWC), the layout the output
// tensors use: decoding JPEG and PNG under a pixel limit, torchvision's
// RandomResizedCrop and CenterCrop rectangles, PIL-compatible antialiased
// bilinear resampling and horizontal flips.
//
// Operations are pure functions of their inputs (randomness comes in as a
// *rand.Rand the caller seeds), so a pipeline built from them gives
// byte-identical output for the same sample and seed. The numerics follow
// what torchvision's ImageNet recipes do on PIL images: resampling matches
// Pillow's bit for bit (a test pins it). Decoding does not quite: Go's JPEG
// decoder replicates subsampled chroma where libjpeg interpolates it, so
// colours at chroma edges differ slightly from PIL's.
//
// DecodeRegion is the fast path crops take: it decodes only the rows,
// blocks and DCT scale a region needs. The default build does that in pure
// Go (internal/jpeg, a fork of the standard library's decoder); building
// with -tags turbojpeg (cgo, Debian's libjpeg62-turbo-dev) does it with
// libjpeg-turbo, which decodes exactly as PIL does at full scale. Decoder
// names the one compiled in; Size reads a JPEG's header with it too.
// Decode always uses the pure-Go decoder.
//
// Both builds take the JPEGs libjpeg-turbo, and so PIL, takes, as far as
// the image comes out whole: arithmetic coding, restart intervals,
// Motion-JPEG frames without Huffman tables, and bytes that belong to no
// segment (junk between segments, a stray FF00, the rest of an APPn
// segment whose length falls short, padding before a marker), which are
// skipped. The turbojpeg build also takes sampling factors the pure-Go
// decoder does not (a factor of 3, say). Scan data that is missing or does
// not decode fails the sample where libjpeg would fill in grey or made-up
// blocks; so do what neither decodes (12-bit, lossless and hierarchical
// JPEGs) and a file cut short, each with an error that says why.
//
// Memory: besides the pixel limit per image (DefaultMaxPixels), a Budget
// bounds what the decoded images of a whole process hold at once. A
// decode reserves DecodeCost, read from the header (a 16-bit PNG counts
// at the 8 bytes a pixel Go's decoder gives it, a progressive JPEG with
// its coefficients), and waits for room; an image whose cost alone is
// over the budget is refused (*OverBudgetError). BudgetFor sizes it as a
// share of the process's memory limit.
package image
