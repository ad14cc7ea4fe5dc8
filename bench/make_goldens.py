#!/usr/bin/python3
"""Writes functions/conformance/testdata: a handful of JPEGs and, for each,
the uint8 output of torchvision's evaluation transform on it,

    Resize(256), CenterCrop(224)

applied to the PIL image (Image.open(...).convert("RGB"), as torchvision's
ImageFolder loads it), saved losslessly as NAME.golden.png (224x224 RGB).
The conformance test runs Sluice's imagenet-eval on the same JPEGs and
checks the PSNR against these. The JPEGs cover what decoders disagree on:
4:2:0 and 4:4:4 chroma, progressive scans, grayscale and an image smaller
than 256 (so Resize enlarges it). JPEGs already in OUTDIR whose names start
with "go_" (Go's encoder, no JFIF marker; the committed one is sample 0 of
`go run ./bench/genimages --samples 1 --min-side 300 --max-side 340`) get
goldens too.

Usage: /usr/bin/python3 bench/make_goldens.py [OUTDIR]
(needs Debian's python3-torchvision and python3-pil; deterministic).
"""

import math
import os
import random
import sys

import numpy as np
import torchvision
from PIL import Image
from torchvision import transforms as T


def photo(w, h, seed):
    """Smooth colour fields, a few hard-edged shapes and sensor-like noise:
    a photograph's ingredients, without shipping one."""
    rnd = random.Random(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        fx, fy, ph = rnd.uniform(0.5, 3), rnd.uniform(0.5, 3), rnd.uniform(0, 6.3)
        img[..., c] = 128 + 90 * np.sin(fx * xx / w * math.pi + ph) * np.cos(fy * yy / h * math.pi)
    for _ in range(6):
        cx, cy, r = rnd.uniform(0, w), rnd.uniform(0, h), rnd.uniform(0.05, 0.25) * min(w, h)
        colour = [rnd.uniform(0, 255) for _ in range(3)]
        disc = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
        img[disc] = colour
    # Fine texture: stripes and noise on luma.
    img += (12 * np.sin(xx / 1.7) * np.sin(yy / 2.3))[..., None]
    img += np.random.default_rng(seed).normal(0, 6, (h, w, 1))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "functions", "conformance", "testdata")
    os.makedirs(out, exist_ok=True)
    inputs = {
        "photo_420.jpg": (photo(400, 300, 1), dict(quality=90)),
        "photo_444.jpg": (photo(300, 420, 2), dict(quality=95, subsampling=0)),
        "progressive.jpg": (photo(333, 250, 3), dict(quality=85, progressive=True)),
        "gray.jpg": (photo(280, 300, 4).convert("L"), dict(quality=90)),
        "small.jpg": (photo(240, 230, 5), dict(quality=90)),
    }
    for name, (img, opts) in inputs.items():
        img.save(os.path.join(out, name), **opts)
    names = sorted(n for n in os.listdir(out) if n.endswith(".jpg"))
    tf = T.Compose([T.Resize(256), T.CenterCrop(224)])
    for name in names:
        path = os.path.join(out, name)
        src = Image.open(path).convert("RGB")
        golden = tf(src)
        assert golden.size == (224, 224) and golden.mode == "RGB"
        golden.save(os.path.join(out, name[:-4] + ".golden.png"))
        print(f"{name}: {src.size[0]}x{src.size[1]}, {os.path.getsize(path)} bytes")
    print(f"torchvision {torchvision.__version__}, Pillow {Image.__version__}")


if __name__ == "__main__":
    main()
