/*
 * arith transcodes a JPEG to arithmetic coding without decoding it: the
 * DCT coefficients are copied, so the output decodes to exactly the
 * input's pixels. Unlike jpegtran -arithmetic it can also set the DAC
 * conditioning (the DC L and U bounds and the AC K threshold, which
 * libjpeg otherwise leaves at their defaults 0, 1 and 5), so the decoder's
 * handling of other values is tested too. gen_recoded.sh runs it.
 *
 *   arith [-progressive] [-restart BLOCKS] [-dac L,U,K] in.jpg out.jpg
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

int main(int argc, char **argv) {
	int progressive = 0, restart = 0, dac = 0, l = 0, u = 1, k = 5;
	int i = 1;
	for (; i < argc - 2; i++) {
		if (!strcmp(argv[i], "-progressive")) {
			progressive = 1;
		} else if (!strcmp(argv[i], "-restart") && i + 1 < argc - 2) {
			restart = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "-dac") && i + 1 < argc - 2 && sscanf(argv[++i], "%d,%d,%d", &l, &u, &k) == 3) {
			dac = 1;
		} else {
			break;
		}
	}
	if (i != argc - 2) {
		fprintf(stderr, "usage: arith [-progressive] [-restart BLOCKS] [-dac L,U,K] in.jpg out.jpg\n");
		return 2;
	}
	FILE *in = fopen(argv[i], "rb"), *out = fopen(argv[i + 1], "wb");
	if (!in || !out) {
		perror("arith");
		return 1;
	}
	struct jpeg_decompress_struct src;
	struct jpeg_compress_struct dst;
	struct jpeg_error_mgr jerr;
	src.err = jpeg_std_error(&jerr);
	dst.err = src.err;
	jpeg_create_decompress(&src);
	jpeg_create_compress(&dst);
	jpeg_stdio_src(&src, in);
	jpeg_read_header(&src, TRUE);
	jvirt_barray_ptr *coefs = jpeg_read_coefficients(&src);
	jpeg_copy_critical_parameters(&src, &dst);
	dst.arith_code = TRUE;
	dst.optimize_coding = FALSE;
	if (progressive) {
		jpeg_simple_progression(&dst);
	}
	dst.restart_interval = restart;
	if (dac) {
		for (int t = 0; t < NUM_ARITH_TBLS; t++) {
			dst.arith_dc_L[t] = l;
			dst.arith_dc_U[t] = u;
			dst.arith_ac_K[t] = k;
		}
	}
	jpeg_stdio_dest(&dst, out);
	jpeg_write_coefficients(&dst, coefs);
	jpeg_finish_compress(&dst);
	jpeg_finish_decompress(&src);
	jpeg_destroy_compress(&dst);
	jpeg_destroy_decompress(&src);
	fclose(in);
	return fclose(out) != 0;
}
