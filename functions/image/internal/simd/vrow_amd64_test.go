//go:build amd64 && !purego

package simd

func hasAVX2Here() bool { return hasAVX2() }
