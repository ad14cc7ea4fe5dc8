// Sluice's addition to the fork (see doc.go); not from the Go tree.

package jpeg

// Reduced-size inverse DCTs: a block reconstructed at m x m pixels (m = 1,
// 2 or 4) for a decode at m/8 scale. Output pixel (x, y) is the m-point
// inverse DCT of the block's m x m lowest-frequency coefficients,
//
//	f(x, y) = 1/4 Σ_u Σ_v C(u) C(v) F(u, v) cos((2x+1)uπ/2m) cos((2y+1)vπ/2m)
//
// for u, v < m, with C(0) = 1/√2 and C(k) = 1 otherwise: the usual 8-point
// formula with the higher frequencies dropped and the sample points spread
// over the block, so each output pixel is the band-limited image sampled at
// the centre of the 8/m x 8/m pixels it stands for (at m = 1, the block's
// mean). libjpeg's scaled decoding computes the same transform with other
// roundings.

// zigOf maps a coefficient's natural (row-major) index to its zig-zag
// index, where the quantization tables hold it: the inverse of unzig.
var zigOf = [blockSize]int{
	0, 1, 5, 6, 14, 15, 27, 28,
	2, 4, 7, 13, 16, 26, 29, 42,
	3, 8, 12, 17, 25, 30, 41, 43,
	9, 11, 18, 24, 31, 40, 44, 53,
	10, 19, 23, 32, 39, 45, 52, 54,
	20, 22, 33, 38, 46, 51, 55, 60,
	21, 34, 37, 47, 50, 56, 59, 61,
	35, 36, 48, 49, 57, 58, 62, 63,
}

// cosBits is the fixed-point precision of the cosine tables.
const cosBits = 13

// cos2 and cos4 are C(u) cos((2x+1)uπ/2m) * 2^13, rounded, indexed [x][u].
var (
	cos2 = [2][2]int64{{5793, 5793}, {5793, -5793}}
	cos4 = [4][4]int64{
		{5793, 7568, 5793, 3135},
		{5793, 3135, -5793, -7568},
		{5793, -3135, -5793, 7568},
		{5793, -7568, 5793, -3135},
	}
)

// idctScaled dequantizes b's m x m low-frequency coefficients with qt (in
// zig-zag order), inverse-transforms them to m x m pixels, level-shifts and
// clips them, and writes them to dst (rows stride bytes apart). m is 1, 2
// or 4. Arithmetic is in int64: corrupt data can make the dequantized
// coefficients large, and nothing must overflow.
func idctScaled(b *block, qt *block, m int, dst []byte, stride int) {
	if m == 1 {
		// f = F(0, 0)/8, rounded half up.
		dst[0] = clampPixel((int64(b[0])*int64(qt[0]) + 4) >> 3)
		return
	}
	var f [4][4]int64 // f[v][u]: dequantized, v vertical frequency
	for v := range m {
		for u := range m {
			f[v][u] = int64(b[v*8+u]) * int64(qt[zigOf[v*8+u]])
		}
	}
	tab := cos4[:]
	if m == 2 {
		tab = [][4]int64{{cos2[0][0], cos2[0][1]}, {cos2[1][0], cos2[1][1]}}
	}
	// Rows: r[v][x] = Σ_u f[v][u] T[x][u].
	var r [4][4]int64
	for v := range m {
		for x := range m {
			var s int64
			for u := range m {
				s += f[v][u] * tab[x][u]
			}
			r[v][x] = s
		}
	}
	// Columns: pixel(x, y) = 1/4 Σ_v r[v][x] T[y][v], then scaled back.
	const shift = 2*cosBits + 2
	for y := range m {
		row := dst[y*stride : y*stride+m]
		for x := range m {
			var s int64
			for v := range m {
				s += r[v][x] * tab[y][v]
			}
			row[x] = clampPixel((s + 1<<(shift-1)) >> shift)
		}
	}
}

// clampPixel level-shifts a reconstructed sample by 128 and clips it.
func clampPixel(v int64) uint8 {
	v += 128
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}
