#!/usr/bin/python3
"""Writes the JPEGs the image package's decoder tests read, with Pillow
(libjpeg-turbo underneath): encodings Go's image/jpeg cannot produce.

    cd functions/image/testdata && /usr/bin/python3 gen.py
"""
import math
from PIL import Image


def picture(w, h):
    """Gradients, a disc and fine stripes: edges and texture in every channel."""
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            r = int(255 * x / (w - 1))
            g = int(255 * y / (h - 1))
            b = int(127 + 127 * math.sin(x / 3.0) * math.cos(y / 5.0))
            if (x - w * 0.6) ** 2 + (y - h * 0.4) ** 2 < (min(w, h) * 0.25) ** 2:
                r, g, b = 255 - r, 255 - g, 40
            px[x, y] = (r, g, b)
    return img


pic = picture(200, 150)
pic.save("progressive.jpg", quality=90, progressive=True)  # 4:2:0, several scans
pic.convert("L").save("progressive_gray.jpg", quality=90, progressive=True)
pic.save("baseline444.jpg", quality=90, subsampling=0)
pic.resize((64, 48)).convert("CMYK").save("cmyk.jpg", quality=90)
