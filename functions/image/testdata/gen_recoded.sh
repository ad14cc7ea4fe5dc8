#!/bin/sh
# Writes the JPEGs the decoder tests read that are another file gen.py
# wrote, coded differently: each is made without decoding (the DCT
# coefficients are copied), so it decodes to exactly its source's pixels.
# Needs Debian's libjpeg-turbo-progs.
#
#     cd functions/image/testdata && sh gen_recoded.sh
set -eu
# A progressive 4:2:0 file with a restart interval: in its scans of one
# component, every block is an MCU the interval counts.
jpegtran -progressive -restart 3B progressive.jpg > progressive_restart.jpg
