//go:build turbojpeg && cgo

package image

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

// libjpeg's default error handler calls exit(); ours longjmps back to the
// C function that called into libjpeg, with the message kept for Go.
typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
} sl_err;

typedef struct {
	struct jpeg_decompress_struct d;
	struct jpeg_progress_mgr progress;
	sl_err err;
	int created;
} sl_dec;

// A progressive JPEG may hold any number of scans, each a pass over the
// whole coefficient buffer: a few kilobytes can cost minutes of CPU.
// libjpeg-turbo 3's TurboJPEG API caps them the same way.
#define SL_MAX_SCANS 500

static void sl_error_exit(j_common_ptr c) {
	sl_err *e = (sl_err *)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

// sl_harmless says whether a warning leaves the image whole: bytes that
// are no part of any segment or scan (junk between segments, a segment
// whose length is off, padding after a scan or before a restart marker),
// which libjpeg skips to the next marker, a JFIF version or Adobe
// transform it does not know, a bad ICC profile chunk. PIL decodes these,
// and the Go decoder skips the same bytes.
static int sl_harmless(struct jpeg_error_mgr *e) {
	switch (e->msg_code) {
	case JWRN_EXTRANEOUS_DATA:
	case JWRN_JFIF_MAJOR:
	case JWRN_ADOBE_XFORM:
	case JWRN_BOGUS_ICC:
		return 1;
	}
	return 0;
}

// Any other warning (level < 0) is scan data that is missing or does not
// decode, which libjpeg would paper over with grey or made-up blocks: the
// sample fails instead, as with the Go decoder. Trace messages (level >= 0)
// are dropped.
static void sl_emit_message(j_common_ptr c, int level) {
	if (level < 0 && !sl_harmless(c->err)) {
		sl_err *e = (sl_err *)c->err;
		(*c->err->format_message)(c, e->msg);
		longjmp(e->jb, 1);
	}
}

static void sl_output_message(j_common_ptr c) {}

static void sl_progress(j_common_ptr c) {
	j_decompress_ptr d = (j_decompress_ptr)c;
	if (d->input_scan_number > SL_MAX_SCANS) {
		sl_err *e = (sl_err *)c->err;
		snprintf(e->msg, sizeof e->msg, "progressive JPEG with more than %d scans", SL_MAX_SCANS);
		longjmp(e->jb, 1);
	}
}

// sl_open reads the header of data (n > 0 bytes), which must stay put
// until sl_close. maxMem bounds libjpeg's large buffers (there is no
// backing store, so going over it is an error). 0 means ok; else s->err.msg.
static int sl_open(sl_dec *s, const unsigned char *data, unsigned long n, long maxMem) {
	s->d.err = jpeg_std_error(&s->err.pub);
	s->err.pub.error_exit = sl_error_exit;
	s->err.pub.emit_message = sl_emit_message;
	s->err.pub.output_message = sl_output_message;
	if (setjmp(s->err.jb)) {
		return 1;
	}
	jpeg_create_decompress(&s->d);
	s->created = 1;
	s->d.mem->max_memory_to_use = maxMem;
	s->progress.progress_monitor = sl_progress;
	s->d.progress = &s->progress;
	jpeg_mem_src(&s->d, data, n);
	jpeg_read_header(&s->d, TRUE);
	return 0;
}

// sl_decode decodes rows [y0, y0+h) and at least columns [x0, x0+w) of the
// image scaled by num/8, as RGB, into out (cap bytes). The crop is widened
// on the left to an iMCU boundary: *ox and *ow are the columns decoded,
// and each row of out is *ow*3 bytes. 0 means ok; else s->err.msg.
static int sl_decode(sl_dec *s, int num, unsigned int x0, unsigned int w, unsigned int y0, unsigned int h,
		unsigned char *out, size_t cap, unsigned int *ox, unsigned int *ow) {
	j_decompress_ptr d = &s->d;
	if (setjmp(s->err.jb)) {
		return 1;
	}
	d->scale_num = num;
	d->scale_denom = 8;
	d->out_color_space = JCS_RGB;
	jpeg_start_decompress(d);
	if (w == 0 || h == 0 || x0 + w > d->output_width || y0 + h > d->output_height) {
		snprintf(s->err.msg, sizeof s->err.msg, "region %ux%u+%u+%u outside the %ux%u scaled image",
			w, h, x0, y0, d->output_width, d->output_height);
		return 1;
	}
	JDIMENSION cx = x0, cw = w;
	jpeg_crop_scanline(d, &cx, &cw);
	*ox = cx;
	*ow = cw;
	size_t stride = (size_t)cw * d->output_components;
	if (d->output_components != 3 || stride * h > cap) {
		snprintf(s->err.msg, sizeof s->err.msg, "%d components of %u columns do not fit the %zu-byte buffer",
			d->output_components, cw, cap);
		return 1;
	}
	if (y0 > 0 && jpeg_skip_scanlines(d, y0) != y0) {
		snprintf(s->err.msg, sizeof s->err.msg, "could not skip to row %u", y0);
		return 1;
	}
	JSAMPROW rows[16];
	for (unsigned int done = 0; done < h;) {
		unsigned int k = h - done;
		if (k > 16) {
			k = 16;
		}
		for (unsigned int i = 0; i < k; i++) {
			rows[i] = out + (size_t)(done + i) * stride;
		}
		JDIMENSION got = jpeg_read_scanlines(d, rows, k);
		if (got == 0) {
			snprintf(s->err.msg, sizeof s->err.msg, "no rows after row %u", y0 + done);
			return 1;
		}
		done += got;
	}
	return 0;
}

static void sl_close(sl_dec *s) {
	if (s->created) {
		jpeg_destroy_decompress(&s->d);
		s->created = 0;
	}
}
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"runtime"
	"unsafe"
)

// Decoder names the JPEG decoder compiled in.
const Decoder = "libjpeg-turbo"

// maxColumnAlign bounds how far jpeg_crop_scanline widens a crop: one iMCU,
// at most 8 (DCT size) x 4 (largest horizontal sampling factor) columns.
const maxColumnAlign = 8 * 4

func decodeRegion(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (image.Rectangle, error) {
	return turboDecode(dst, data, r, maxPixels, func(w, h int) (int, image.Rectangle) {
		num := scaleFor(r, w, h, minW, minH)
		return num, scaledRegion(r, w, h, num)
	})
}

// turboDecode decodes a JPEG's region r: plan, given the image's size,
// says at which scale num/8 and which rectangle of the scaled image (sr)
// to decode. Other formats go to the Go decoders.
func turboDecode(dst *RGB, data []byte, r image.Rectangle, maxPixels int, plan func(w, h int) (num int, sr image.Rectangle)) (image.Rectangle, error) {
	if len(data) < 2 || data[0] != 0xff || data[1] != 0xd8 {
		return decodeRegionStd(dst, data, r, 0, 0, maxPixels) // PNG, or an error naming the format
	}
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	s := (*C.sl_dec)(C.calloc(1, C.sizeof_sl_dec))
	if s == nil {
		return image.Rectangle{}, errors.New("decoding jpeg: out of C memory")
	}
	defer C.free(unsafe.Pointer(s))
	defer C.sl_close(s)
	// libjpeg keeps a pointer to data between the calls below.
	var pin runtime.Pinner
	pin.Pin(&data[0])
	defer pin.Unpin()

	// The largest buffer libjpeg may need is a progressive image's
	// coefficients: 2 bytes per coefficient, 3 full-size components at most
	// for the RGB outputs we accept, so 6 bytes a pixel, plus row buffers.
	maxMem := C.long(min(int64(maxPixels)*6+16<<20, 1<<40))
	if C.sl_open(s, (*C.uchar)(unsafe.Pointer(&data[0])), C.ulong(len(data)), maxMem) != 0 {
		return image.Rectangle{}, fmt.Errorf("reading jpeg header: %s", C.GoString(&s.err.msg[0]))
	}
	w, h := int(s.d.image_width), int(s.d.image_height)
	if px := int64(w) * int64(h); px > int64(maxPixels) {
		return image.Rectangle{}, fmt.Errorf("jpeg is %dx%d = %d pixels, over the %d-pixel limit: %w",
			w, h, px, maxPixels, ErrTooLarge)
	}
	switch s.d.jpeg_color_space {
	case C.JCS_CMYK, C.JCS_YCCK:
		// libjpeg does not convert these to RGB; the Go decoder does.
		C.sl_close(s)
		return decodeRegionStd(dst, data, r, r.Dx(), r.Dy(), maxPixels)
	}
	if r.Empty() || !r.In(image.Rect(0, 0, w, h)) {
		return image.Rectangle{}, fmt.Errorf("region %v is not inside the %dx%d image", r, w, h)
	}
	if err := checkEOI(data); err != nil {
		return image.Rectangle{}, err
	}
	num, sr := plan(w, h)
	// Chroma upsampling replicates the edge at a crop boundary instead of
	// interpolating, so the crop's outer columns are slightly off: decode
	// one more column on each side, where there is one.
	sw := ceilDiv(w*num, 8)
	x0, x1 := max(sr.Min.X-1, 0), min(sr.Max.X+1, sw)
	// jpeg_crop_scanline may widen the crop leftwards to an iMCU boundary:
	// reserve room for that, then take what it decoded.
	dst.Reset(min(x1-x0+maxColumnAlign, sw), sr.Dy())
	var ox, ow C.uint
	if C.sl_decode(s, C.int(num), C.uint(x0), C.uint(x1-x0), C.uint(sr.Min.Y), C.uint(sr.Dy()),
		(*C.uchar)(unsafe.Pointer(&dst.Pix[0])), C.size_t(len(dst.Pix)), &ox, &ow) != 0 {
		return image.Rectangle{}, fmt.Errorf("decoding jpeg: %s", C.GoString(&s.err.msg[0]))
	}
	dst.Reset(int(ow), sr.Dy()) // within the capacity reserved above: no copy
	return sr.Sub(image.Pt(int(ox), sr.Min.Y)), nil
}

// jpegSize reads a JPEG's header with libjpeg, so that Size takes what
// the decoder will.
func jpegSize(data []byte) (w, h int, err error) {
	s := (*C.sl_dec)(C.calloc(1, C.sizeof_sl_dec))
	if s == nil {
		return 0, 0, errors.New("out of C memory")
	}
	defer C.free(unsafe.Pointer(s))
	defer C.sl_close(s)
	var pin runtime.Pinner
	pin.Pin(&data[0])
	defer pin.Unpin()
	// The header needs no large buffer.
	if C.sl_open(s, (*C.uchar)(unsafe.Pointer(&data[0])), C.ulong(len(data)), 16<<20) != 0 {
		return 0, 0, errors.New(C.GoString(&s.err.msg[0]))
	}
	return int(s.d.image_width), int(s.d.image_height), nil
}
