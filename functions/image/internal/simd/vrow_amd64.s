//go:build amd64 && !purego

#include "textflag.h"

// func vrowAVX2(out *uint8, n int, src *uint8, stride int, k *int32, taps int)
// n is a multiple of 16 and taps >= 1; row j of the source starts at
// src + j*stride. out[i] = clamp((1<<21 + Σ_j src[j*stride+i]*k[j]) >> 22, 0, 255).
TEXT ·vrowAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ src+16(FP), SI
	MOVQ stride+24(FP), DX
	MOVQ k+32(FP), R8
	MOVQ taps+40(FP), R9
	MOVL $0x200000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // rounding: half of 1<<22
	MOVL $255, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13 // 255
	VPXOR Y14, Y14, Y14   // 0

loop:
	CMPQ CX, $16
	JLT  done
	VMOVDQU Y15, Y0 // sums of bytes 0-7
	VMOVDQU Y15, Y1 // sums of bytes 8-15
	MOVQ SI, R10
	MOVQ R8, R11
	MOVQ R9, R12

tap:
	VPBROADCASTD (R11), Y2
	VPMOVZXBD    (R10), Y3
	VPMOVZXBD    8(R10), Y4
	VPMULLD      Y2, Y3, Y3
	VPMULLD      Y2, Y4, Y4
	VPADDD       Y3, Y0, Y0
	VPADDD       Y4, Y1, Y1
	ADDQ         DX, R10
	ADDQ         $4, R11
	DECQ         R12
	JNZ          tap

	VPSRAD       $22, Y0, Y0
	VPSRAD       $22, Y1, Y1
	VPMAXSD      Y14, Y0, Y0
	VPMAXSD      Y14, Y1, Y1
	VPMINSD      Y13, Y0, Y0
	VPMINSD      Y13, Y1, Y1
	VPACKUSDW    Y1, Y0, Y0  // words: a0-3 b0-3 | a4-7 b4-7
	VPERMQ       $0xD8, Y0, Y0 // a0-3 a4-7 | b0-3 b4-7
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB    X1, X0, X0  // bytes a0-7 b0-7
	VMOVDQU      X0, (DI)
	ADDQ         $16, DI
	ADDQ         $16, SI
	SUBQ         $16, CX
	JMP          loop

done:
	VZEROUPPER
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
