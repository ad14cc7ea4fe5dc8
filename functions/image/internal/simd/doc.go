// Package simd holds the image package's AVX2 kernels for its bilinear
// resampling passes: Vrow (vertical, sixteen bytes of a row at a time) and
// HStrip (horizontal, eight rows at a time through a byte transpose). They
// compute exactly the image package's 22-bit fixed-point sums, which its
// tests check against its scalar loops; callers fall back to those loops
// where the CPU lacks AVX2 (Vrow returns 0, HStripOK is false) or on other
// architectures (and with -tags purego). Go assembly cannot live in a
// package that uses cgo, as the image package does in its turbojpeg build,
// hence a package of its own.
package simd
