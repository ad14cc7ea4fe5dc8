// Package conformance holds no code, only a test: Sluice's imagenet-eval
// pipeline against torchvision's Resize(256), CenterCrop(224) on the same
// JPEGs, decoded by PIL. The goldens in testdata are torchvision's uint8
// outputs, written by bench/make_goldens.py (Debian's python3-torchvision
// 0.14 and Pillow 9.4 with libjpeg-turbo 2.1.5); the test requires a PSNR
// of at least 30 dB for each, in the pure-Go build and in the turbojpeg
// build alike:
//
//	go test ./functions/conformance
//	go test -tags turbojpeg ./functions/conformance
//
// It lives apart from the pipeline and image packages because it checks
// them together, from the outside, as a user of a built-in pipeline would.
package conformance
