//go:build amd64 && !purego

#include "textflag.h"

// The horizontal resampling pass, eight rows at a time: the rows are
// transposed so that each source byte's eight row values are contiguous
// (transpose8x16), summed like the vertical pass with one weight per tap
// for all eight lanes (hstripAVX2), and transposed back (untranspose16x8).

// func transpose8x16(dst *uint8, src *uint8, stride int, blocks int)
// For each block b: rows r < 8 of 16 bytes at src + r*stride + 16b become
// dst[128b + 8j + r] = row r's byte j: sixteen groups of eight row values.
TEXT ·transpose8x16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ (DX)(DX*2), R8

tloop:
	TESTQ CX, CX
	JZ    tdone
	LEAQ  (SI)(DX*4), R9
	MOVOU (SI), X0
	MOVOU (SI)(DX*1), X1
	MOVOU (SI)(DX*2), X2
	MOVOU (SI)(R8*1), X3
	MOVOU (R9), X4
	MOVOU (R9)(DX*1), X5
	MOVOU (R9)(DX*2), X6
	MOVOU (R9)(R8*1), X7

	VPUNPCKLBW X1, X0, X8  // r0,r1 bytes 0-7
	VPUNPCKHBW X1, X0, X9  // r0,r1 bytes 8-15
	VPUNPCKLBW X3, X2, X10
	VPUNPCKHBW X3, X2, X11
	VPUNPCKLBW X5, X4, X12
	VPUNPCKHBW X5, X4, X13
	VPUNPCKLBW X7, X6, X14
	VPUNPCKHBW X7, X6, X15

	VPUNPCKLWD X10, X8, X0  // bytes 0-3, rows 0-3
	VPUNPCKHWD X10, X8, X1  // bytes 4-7, rows 0-3
	VPUNPCKLWD X11, X9, X2  // bytes 8-11
	VPUNPCKHWD X11, X9, X3  // bytes 12-15
	VPUNPCKLWD X14, X12, X4 // bytes 0-3, rows 4-7
	VPUNPCKHWD X14, X12, X5
	VPUNPCKLWD X15, X13, X6
	VPUNPCKHWD X15, X13, X7

	VPUNPCKLDQ X4, X0, X8  // bytes 0, 1: rows 0-7 each
	VPUNPCKHDQ X4, X0, X9  // bytes 2, 3
	VPUNPCKLDQ X5, X1, X10
	VPUNPCKHDQ X5, X1, X11
	VPUNPCKLDQ X6, X2, X12
	VPUNPCKHDQ X6, X2, X13
	VPUNPCKLDQ X7, X3, X14
	VPUNPCKHDQ X7, X3, X15

	MOVOU X8, 0(DI)
	MOVOU X9, 16(DI)
	MOVOU X10, 32(DI)
	MOVOU X11, 48(DI)
	MOVOU X12, 64(DI)
	MOVOU X13, 80(DI)
	MOVOU X14, 96(DI)
	MOVOU X15, 112(DI)
	ADDQ  $16, SI
	ADDQ  $128, DI
	DECQ  CX
	JMP   tloop

tdone:
	RET

// func untranspose16x8(dst *uint8, stride int, src *uint8, blocks int)
// The inverse: for each block b, sixteen groups of eight row values at
// src + 128b become rows r < 8 of 16 bytes at dst + r*stride + 16b.
TEXT ·untranspose16x8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ blocks+24(FP), CX
	LEAQ (DX)(DX*2), R8

uloop:
	TESTQ CX, CX
	JZ    udone

	// Groups 0-7: an 8x8 transpose into rows (0,1), (2,3), (4,5), (6,7).
	MOVQ       0(SI), X0
	MOVQ       8(SI), X1
	MOVQ       16(SI), X2
	MOVQ       24(SI), X3
	MOVQ       32(SI), X4
	MOVQ       40(SI), X5
	MOVQ       48(SI), X6
	MOVQ       56(SI), X7
	VPUNPCKLBW X1, X0, X8
	VPUNPCKLBW X3, X2, X9
	VPUNPCKLBW X5, X4, X10
	VPUNPCKLBW X7, X6, X11
	VPUNPCKLWD X9, X8, X12   // groups 0-3, rows 0-3
	VPUNPCKHWD X9, X8, X13   // groups 0-3, rows 4-7
	VPUNPCKLWD X11, X10, X14 // groups 4-7, rows 0-3
	VPUNPCKHWD X11, X10, X15 // groups 4-7, rows 4-7
	VPUNPCKLDQ X14, X12, X0  // rows 0, 1 (groups 0-7)
	VPUNPCKHDQ X14, X12, X1  // rows 2, 3
	VPUNPCKLDQ X15, X13, X2  // rows 4, 5
	VPUNPCKHDQ X15, X13, X3  // rows 6, 7

	// Groups 8-15, the same, into X12-X15.
	MOVQ       64(SI), X4
	MOVQ       72(SI), X5
	MOVQ       80(SI), X6
	MOVQ       88(SI), X7
	MOVQ       96(SI), X8
	MOVQ       104(SI), X9
	MOVQ       112(SI), X10
	MOVQ       120(SI), X11
	VPUNPCKLBW X5, X4, X12
	VPUNPCKLBW X7, X6, X13
	VPUNPCKLBW X9, X8, X14
	VPUNPCKLBW X11, X10, X15
	VPUNPCKLWD X13, X12, X4
	VPUNPCKHWD X13, X12, X5
	VPUNPCKLWD X15, X14, X6
	VPUNPCKHWD X15, X14, X7
	VPUNPCKLDQ X6, X4, X12   // rows 0, 1 (groups 8-15)
	VPUNPCKHDQ X6, X4, X13   // rows 2, 3
	VPUNPCKLDQ X7, X5, X14   // rows 4, 5
	VPUNPCKHDQ X7, X5, X15   // rows 6, 7

	// Row r: groups 0-7 then 8-15.
	VPUNPCKLQDQ X12, X0, X4
	VPUNPCKHQDQ X12, X0, X5
	VPUNPCKLQDQ X13, X1, X6
	VPUNPCKHQDQ X13, X1, X7
	VPUNPCKLQDQ X14, X2, X8
	VPUNPCKHQDQ X14, X2, X9
	VPUNPCKLQDQ X15, X3, X10
	VPUNPCKHQDQ X15, X3, X11

	LEAQ  (DI)(DX*4), R9
	MOVOU X4, (DI)
	MOVOU X5, (DI)(DX*1)
	MOVOU X6, (DI)(DX*2)
	MOVOU X7, (DI)(R8*1)
	MOVOU X8, (R9)
	MOVOU X9, (R9)(DX*1)
	MOVOU X10, (R9)(DX*2)
	MOVOU X11, (R9)(R8*1)
	ADDQ  $128, SI
	ADDQ  $16, DI
	DECQ  CX
	JMP   uloop

udone:
	RET

// func hstripAVX2(out *uint8, n int, t *uint8, starts *int, k *int32, kstride int, taps int)
// For each output i < n: p = t + 24*starts[i] (a transposed pixel: R, G and
// B, eight rows each); for channel c and row r,
// out[24i + 8c + r] = clamp((1<<21 + Σ_j p[24j + 8c + r]*k[j]) >> 22, 0, 255)
// with k = the i-th weights, kstride bytes after the (i-1)-th.
TEXT ·hstripAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ t+16(FP), SI
	MOVQ starts+24(FP), BX
	MOVQ k+32(FP), R8
	MOVQ kstride+40(FP), R13
	MOVQ taps+48(FP), R9
	MOVL $0x200000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $255, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VPXOR Y14, Y14, Y14

hloop:
	TESTQ CX, CX
	JZ    hdone
	MOVQ  (BX), AX
	IMUL3Q $24, AX, R10
	ADDQ  SI, R10
	MOVQ  R8, R11
	MOVQ  R9, R12
	VMOVDQU Y15, Y0
	VMOVDQU Y15, Y1
	VMOVDQU Y15, Y2

htap:
	VPBROADCASTD (R11), Y3
	VPMOVZXBD    (R10), Y4
	VPMOVZXBD    8(R10), Y5
	VPMOVZXBD    16(R10), Y6
	VPMULLD      Y3, Y4, Y4
	VPMULLD      Y3, Y5, Y5
	VPMULLD      Y3, Y6, Y6
	VPADDD       Y4, Y0, Y0
	VPADDD       Y5, Y1, Y1
	VPADDD       Y6, Y2, Y2
	ADDQ         $24, R10
	ADDQ         $4, R11
	DECQ         R12
	JNZ          htap

	VPSRAD       $22, Y0, Y0
	VPSRAD       $22, Y1, Y1
	VPSRAD       $22, Y2, Y2
	VPMAXSD      Y14, Y0, Y0
	VPMAXSD      Y14, Y1, Y1
	VPMAXSD      Y14, Y2, Y2
	VPMINSD      Y13, Y0, Y0
	VPMINSD      Y13, Y1, Y1
	VPMINSD      Y13, Y2, Y2
	VPACKUSDW    Y1, Y0, Y4    // words: R0-3 G0-3 | R4-7 G4-7
	VPERMQ       $0xD8, Y4, Y4 // R0-7 | G0-7
	VEXTRACTI128 $1, Y4, X5
	VPACKUSWB    X5, X4, X4    // bytes R0-7 G0-7
	VMOVDQU      X4, (DI)
	VEXTRACTI128 $1, Y2, X5
	VPACKUSDW    X5, X2, X4    // words B0-7
	VPACKUSWB    X4, X4, X4
	MOVQ         X4, 16(DI)
	ADDQ         $24, DI
	ADDQ         $8, BX
	ADDQ         R13, R8
	DECQ         CX
	JMP          hloop

hdone:
	VZEROUPPER
	RET
