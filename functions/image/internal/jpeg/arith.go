// Sluice's addition to the fork (see doc.go); not from the Go tree. It is a
// port of libjpeg-turbo's arithmetic decoder (jdarith.c and jaricom.c),
// which carry this notice: "This file was part of the Independent JPEG
// Group's software: Developed 1997-2015 by Guido Vollbeding.
// libjpeg-turbo Modifications: Copyright (C) 2015-2020, 2022,
// D. R. Commander." This software is based in part on the work of the
// Independent JPEG Group.

package jpeg

// Arithmetic-coded JPEGs (SOF9 sequential, SOF10 progressive): the
// adaptive binary arithmetic decoder of Annex D and the decoding
// procedures of sections F.2.4 and G.1.3, as libjpeg-turbo implements
// them. The scan loop in scan.go is shared with Huffman coding; only the
// decoding of a block's coefficients differs.

// Statistics bins per table (sections F.1.4.4.1.3 and F.1.4.4.2): at least
// 49 for DC and 245 for AC, one byte each, holding the more probable
// symbol (bit 7) and the index into aritab (bits 0-6).
const (
	dcStatBins = 64
	acStatBins = 256
	// fixedBin is aritab's entry for a fixed probability of 0.5.
	fixedBin = 113
)

// arithState is an arithmetic-coded scan's decoder state.
type arithState struct {
	// c is the code register (the interval's base and the bits read
	// ahead), a the interval's size; ct counts the bits of c not yet
	// shifted into the base (-16 before the first two bytes are read).
	c, a int64
	ct   int
	// atMarker means the segment's data has ended at a marker, which is
	// left unread: the decoder is fed zeros from there (section D.2.6).
	atMarker bool

	dcStats [maxTh + 1][dcStatBins]uint8
	acStats [maxTh + 1][acStatBins]uint8
	fixed   uint8
	// dcPred is each component's last DC value, modulo 2^16; dcContext its
	// DC conditioning category's offset into the DC statistics.
	dcPred    [maxComponents]int32
	dcContext [maxComponents]int

	// Conditioning (DAC marker, section B.2.4.3): the DC bounds L and U
	// and the AC threshold K of each table.
	dcL, dcU, acK [maxTh + 1]uint8
}

// resetConditioning sets the conditioning every image starts with.
func (e *arithState) resetConditioning() {
	for i := range e.dcL {
		e.dcL[i], e.dcU[i], e.acK[i] = 0, 1, 5
	}
}

// processDAC reads a Define Arithmetic Conditioning segment (section
// B.2.4.3).
func (d *decoder) processDAC(n int) error {
	if n%2 != 0 {
		return FormatError("DAC has wrong length")
	}
	for ; n > 0; n -= 2 {
		if err := d.readFull(d.tmp[:2]); err != nil {
			return err
		}
		tc, tb, v := d.tmp[0]>>4, d.tmp[0]&0x0f, d.tmp[1]
		if tc > 1 {
			return FormatError("bad DAC table class")
		}
		if tb > maxTh {
			continue // no scan can select it
		}
		if tc == 1 {
			d.arith.acK[tb] = v
			continue
		}
		l, u := v&0x0f, v>>4
		if l > u {
			return FormatError("bad DAC value: DC lower bound above upper")
		}
		d.arith.dcL[tb], d.arith.dcU[tb] = l, u
	}
	return nil
}

// arithStart readies the decoder for a scan or, after a restart marker, an
// interval: it clears the statistics of the tables the scan uses (DC
// statistics only for a scan that codes DC values, AC statistics only for
// one that codes AC coefficients) and the DC predictions.
func (d *decoder) arithStart(scan []scanComp, zigStart int32, ah uint32) {
	e := &d.arith
	for _, sc := range scan {
		if !d.progressive || zigStart == 0 && ah == 0 {
			e.dcStats[sc.td] = [dcStatBins]uint8{}
			e.dcPred[sc.compIndex], e.dcContext[sc.compIndex] = 0, 0
		}
		if !d.progressive || zigStart != 0 {
			e.acStats[sc.ta] = [acStatBins]uint8{}
		}
	}
	e.c, e.a, e.ct, e.atMarker = 0, 0, -16, false
	e.fixed = fixedBin
}

// arithDecode decodes one binary decision with the statistics bin st
// (sections D.2.4 to D.2.6; jdarith.c's arith_decode).
func (d *decoder) arithDecode(st *uint8) (int, error) {
	e := &d.arith
	// Renormalization and data input (section D.2.6).
	for e.a < 0x8000 {
		e.ct--
		if e.ct < 0 {
			data := int64(0)
			if !e.atMarker {
				b, err := d.readByte()
				if err != nil {
					return 0, err
				}
				if b == 0xff {
					for b == 0xff {
						if b, err = d.readByte(); err != nil {
							return 0, err
						}
					}
					if b == 0 {
						data = 0xff // a stuffed zero byte
					} else {
						// A marker: unlike Huffman-coded data, arithmetic-coded
						// data may run into one; zeros follow. The marker is
						// given back for the scan loop or the marker reader.
						// readByte keeps the two bytes before a refill, so
						// they are still in the buffer.
						e.atMarker = true
						d.bytes.i -= 2
					}
				} else {
					data = int64(b)
				}
			}
			e.c = e.c<<8 | data
			e.ct += 8
			if e.ct < 0 {
				// Reading the first two bytes.
				e.ct++
				if e.ct == 0 {
					e.a = 0x8000 // 0x10000 after the shift below
				}
			}
		}
		e.a <<= 1
	}

	// Decoding and probability estimation (sections D.2.4 and D.2.5).
	sv := *st
	q := &aritab[sv&0x7f]
	qe := int64(q.qe)
	e.a -= qe
	temp := e.a << e.ct
	if e.c >= temp {
		e.c -= temp
		// Conditional exchange of the less probable symbol.
		if e.a < qe {
			e.a = qe
			*st = sv&0x80 ^ q.nextMPS
		} else {
			e.a = qe
			*st = sv&0x80 ^ q.nextLPS
			sv ^= 0x80
		}
	} else if e.a < 0x8000 {
		// Conditional exchange of the more probable symbol.
		if e.a < qe {
			*st = sv&0x80 ^ q.nextLPS
			sv ^= 0x80
		} else {
			*st = sv&0x80 ^ q.nextMPS
		}
	}
	return int(sv >> 7), nil
}

// errArithCode is a decoded value that cannot be: corrupt data.
var errArithCode = FormatError("bad arithmetic code")

// arithDC decodes a DC difference into component ci's prediction, with
// table tbl (sections F.2.4.1 and F.1.4.4.1).
func (d *decoder) arithDC(ci int, tbl uint8) error {
	e := &d.arith
	st := &e.dcStats[tbl]
	s := e.dcContext[ci]
	nonzero, err := d.arithDecode(&st[s])
	if err != nil || nonzero == 0 {
		e.dcContext[ci] = 0
		return err
	}
	sign, err := d.arithDecode(&st[s+1])
	if err != nil {
		return err
	}
	s += 2 + sign
	m, err := d.arithDecode(&st[s])
	if err != nil {
		return err
	}
	if m != 0 {
		// The magnitude category (figure F.23).
		s = 20
		for {
			bit, err := d.arithDecode(&st[s])
			if err != nil {
				return err
			}
			if bit == 0 {
				break
			}
			if m <<= 1; m == 0x8000 {
				return errArithCode
			}
			s++
		}
	}
	// The conditioning category of the next difference (section
	// F.1.4.4.1.2).
	switch {
	case m < (1<<e.dcL[tbl])>>1:
		e.dcContext[ci] = 0
	case m > (1<<e.dcU[tbl])>>1:
		e.dcContext[ci] = 12 + 4*sign
	default:
		e.dcContext[ci] = 4 + 4*sign
	}
	// The magnitude's bits (figure F.24).
	v := m
	s += 14
	for m >>= 1; m != 0; m >>= 1 {
		bit, err := d.arithDecode(&st[s])
		if err != nil {
			return err
		}
		if bit != 0 {
			v |= m
		}
	}
	v++
	if sign != 0 {
		v = -v
	}
	e.dcPred[ci] = (e.dcPred[ci] + int32(v)) & 0xffff
	return nil
}

// arithAC decodes the AC coefficients zigStart to zigEnd of b, shifted
// left by al, with table tbl (sections F.2.4.2 and G.1.3.2).
func (d *decoder) arithAC(b *block, tbl uint8, zigStart, zigEnd int32, al uint32) error {
	e := &d.arith
	st := &e.acStats[tbl]
	for k := zigStart; k <= zigEnd; k++ {
		s := 3 * int(k-1)
		eob, err := d.arithDecode(&st[s])
		if err != nil || eob != 0 {
			return err
		}
		for {
			nonzero, err := d.arithDecode(&st[s+1])
			if err != nil {
				return err
			}
			if nonzero != 0 {
				break
			}
			s += 3
			if k++; k > zigEnd {
				return errArithCode
			}
		}
		sign, err := d.arithDecode(&e.fixed)
		if err != nil {
			return err
		}
		s += 2
		m, err := d.arithDecode(&st[s])
		if err != nil {
			return err
		}
		if m != 0 {
			bit, err := d.arithDecode(&st[s])
			if err != nil {
				return err
			}
			if bit != 0 {
				m <<= 1
				s = 217
				if k <= int32(e.acK[tbl]) {
					s = 189
				}
				for {
					bit, err := d.arithDecode(&st[s])
					if err != nil {
						return err
					}
					if bit == 0 {
						break
					}
					if m <<= 1; m == 0x8000 {
						return errArithCode
					}
					s++
				}
			}
		}
		v := m
		s += 14
		for m >>= 1; m != 0; m >>= 1 {
			bit, err := d.arithDecode(&st[s])
			if err != nil {
				return err
			}
			if bit != 0 {
				v |= m
			}
		}
		v++
		if sign != 0 {
			v = -v
		}
		// libjpeg keeps coefficients in 16 bits.
		b[unzig[k]] = int32(int16(v << al))
	}
	return nil
}

// arithRefineAC decodes a successive approximation refinement of b's AC
// coefficients zigStart to zigEnd, bit al, with table tbl (section
// G.1.3.3).
func (d *decoder) arithRefineAC(b *block, tbl uint8, zigStart, zigEnd int32, al uint32) error {
	e := &d.arith
	st := &e.acStats[tbl]
	p1, m1 := int32(1)<<al, int32(-1)<<al
	// The end of block of the earlier scans.
	kex := zigEnd
	for ; kex > 0; kex-- {
		if b[unzig[kex]] != 0 {
			break
		}
	}
	for k := zigStart; k <= zigEnd; k++ {
		s := 3 * int(k-1)
		if k > kex {
			eob, err := d.arithDecode(&st[s])
			if err != nil || eob != 0 {
				return err
			}
		}
		for {
			c := &b[unzig[k]]
			if *c != 0 {
				// Already nonzero: one more bit of it.
				bit, err := d.arithDecode(&st[s+2])
				if err != nil {
					return err
				}
				if bit != 0 {
					if *c < 0 {
						*c += m1
					} else {
						*c += p1
					}
				}
				break
			}
			nonzero, err := d.arithDecode(&st[s+1])
			if err != nil {
				return err
			}
			if nonzero != 0 {
				neg, err := d.arithDecode(&e.fixed)
				if err != nil {
					return err
				}
				*c = p1
				if neg != 0 {
					*c = m1
				}
				break
			}
			s += 3
			if k++; k > zigEnd {
				return errArithCode
			}
		}
	}
	return nil
}

// aritab is Table D.2, the probability estimation state machine: each
// state's Qe value, the next state after a more or a less probable
// symbol, and in bit 7 of nextLPS whether a less probable symbol swaps
// the meaning of the two symbols. The last entry is a fixed probability
// of 0.5 (ITU-T T.851, section 10.3, table 5).
var aritab = [114]struct {
	qe               uint16
	nextMPS, nextLPS uint8
}{
	{0x5a1d, 1, 0x81},   // 0
	{0x2586, 2, 14},     // 1
	{0x1114, 3, 16},     // 2
	{0x080b, 4, 18},     // 3
	{0x03d8, 5, 20},     // 4
	{0x01da, 6, 23},     // 5
	{0x00e5, 7, 25},     // 6
	{0x006f, 8, 28},     // 7
	{0x0036, 9, 30},     // 8
	{0x001a, 10, 33},    // 9
	{0x000d, 11, 35},    // 10
	{0x0006, 12, 9},     // 11
	{0x0003, 13, 10},    // 12
	{0x0001, 13, 12},    // 13
	{0x5a7f, 15, 0x8f},  // 14
	{0x3f25, 16, 36},    // 15
	{0x2cf2, 17, 38},    // 16
	{0x207c, 18, 39},    // 17
	{0x17b9, 19, 40},    // 18
	{0x1182, 20, 42},    // 19
	{0x0cef, 21, 43},    // 20
	{0x09a1, 22, 45},    // 21
	{0x072f, 23, 46},    // 22
	{0x055c, 24, 48},    // 23
	{0x0406, 25, 49},    // 24
	{0x0303, 26, 51},    // 25
	{0x0240, 27, 52},    // 26
	{0x01b1, 28, 54},    // 27
	{0x0144, 29, 56},    // 28
	{0x00f5, 30, 57},    // 29
	{0x00b7, 31, 59},    // 30
	{0x008a, 32, 60},    // 31
	{0x0068, 33, 62},    // 32
	{0x004e, 34, 63},    // 33
	{0x003b, 35, 32},    // 34
	{0x002c, 9, 33},     // 35
	{0x5ae1, 37, 0xa5},  // 36
	{0x484c, 38, 64},    // 37
	{0x3a0d, 39, 65},    // 38
	{0x2ef1, 40, 67},    // 39
	{0x261f, 41, 68},    // 40
	{0x1f33, 42, 69},    // 41
	{0x19a8, 43, 70},    // 42
	{0x1518, 44, 72},    // 43
	{0x1177, 45, 73},    // 44
	{0x0e74, 46, 74},    // 45
	{0x0bfb, 47, 75},    // 46
	{0x09f8, 48, 77},    // 47
	{0x0861, 49, 78},    // 48
	{0x0706, 50, 79},    // 49
	{0x05cd, 51, 48},    // 50
	{0x04de, 52, 50},    // 51
	{0x040f, 53, 50},    // 52
	{0x0363, 54, 51},    // 53
	{0x02d4, 55, 52},    // 54
	{0x025c, 56, 53},    // 55
	{0x01f8, 57, 54},    // 56
	{0x01a4, 58, 55},    // 57
	{0x0160, 59, 56},    // 58
	{0x0125, 60, 57},    // 59
	{0x00f6, 61, 58},    // 60
	{0x00cb, 62, 59},    // 61
	{0x00ab, 63, 61},    // 62
	{0x008f, 32, 61},    // 63
	{0x5b12, 65, 0xc1},  // 64
	{0x4d04, 66, 80},    // 65
	{0x412c, 67, 81},    // 66
	{0x37d8, 68, 82},    // 67
	{0x2fe8, 69, 83},    // 68
	{0x293c, 70, 84},    // 69
	{0x2379, 71, 86},    // 70
	{0x1edf, 72, 87},    // 71
	{0x1aa9, 73, 87},    // 72
	{0x174e, 74, 72},    // 73
	{0x1424, 75, 72},    // 74
	{0x119c, 76, 74},    // 75
	{0x0f6b, 77, 74},    // 76
	{0x0d51, 78, 75},    // 77
	{0x0bb6, 79, 77},    // 78
	{0x0a40, 48, 77},    // 79
	{0x5832, 81, 0xd0},  // 80
	{0x4d1c, 82, 88},    // 81
	{0x438e, 83, 89},    // 82
	{0x3bdd, 84, 90},    // 83
	{0x34ee, 85, 91},    // 84
	{0x2eae, 86, 92},    // 85
	{0x299a, 87, 93},    // 86
	{0x2516, 71, 86},    // 87
	{0x5570, 89, 0xd8},  // 88
	{0x4ca9, 90, 95},    // 89
	{0x44d9, 91, 96},    // 90
	{0x3e22, 92, 97},    // 91
	{0x3824, 93, 99},    // 92
	{0x32b4, 94, 99},    // 93
	{0x2e17, 86, 93},    // 94
	{0x56a8, 96, 0xdf},  // 95
	{0x4f46, 97, 101},   // 96
	{0x47e5, 98, 102},   // 97
	{0x41cf, 99, 103},   // 98
	{0x3c3d, 100, 104},  // 99
	{0x375e, 93, 99},    // 100
	{0x5231, 102, 105},  // 101
	{0x4c0f, 103, 106},  // 102
	{0x4639, 104, 107},  // 103
	{0x415e, 99, 103},   // 104
	{0x5627, 106, 0xe9}, // 105
	{0x50e7, 107, 108},  // 106
	{0x4b85, 103, 109},  // 107
	{0x5597, 109, 110},  // 108
	{0x504f, 107, 111},  // 109
	{0x5a10, 111, 0xee}, // 110
	{0x5522, 109, 112},  // 111
	{0x59eb, 111, 0xf0}, // 112
	{0x5a1d, 113, 113},  // 113
}
