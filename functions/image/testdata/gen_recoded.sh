#!/bin/sh
# Writes the JPEGs the decoder tests read that are another file gen.py
# wrote, coded differently: arithmetic-coded (arith.c), or with restart
# markers. Each is made without decoding (the DCT coefficients are
# copied), so it decodes to exactly its source's pixels. Needs Debian's
# libjpeg62-turbo-dev, gcc and libjpeg-turbo-progs.
#
#     cd functions/image/testdata && sh gen_recoded.sh
#
# testimgari.jpg and testimgint.jpg are libjpeg-turbo's own test images
# (testimages/ in github.com/libjpeg-turbo/libjpeg-turbo, IJG licence): the
# same picture arithmetic- and Huffman-coded, with equal coefficients.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/arith" arith.c -ljpeg
"$tmp/arith" -restart 4 baseline444.jpg arith_444.jpg
"$tmp/arith" -progressive -restart 5 -dac 2,6,12 progressive.jpg arith_progressive.jpg
"$tmp/arith" -restart 7 -dac 1,3,2 progressive_gray.jpg arith_gray.jpg
"$tmp/arith" cmyk.jpg arith_cmyk.jpg
# A progressive 4:2:0 file with a restart interval: in its scans of one
# component, every block is an MCU the interval counts.
jpegtran -progressive -restart 3B progressive.jpg > progressive_restart.jpg
# 3x1 luma sampling, which image/jpeg (and so the pure-Go build) does not
# decode and libjpeg-turbo does.
djpeg -scale 1/2 baseline444.jpg | cjpeg -quality 90 -sample 3x1,1x1,1x1 > sampling_3x1.jpg
