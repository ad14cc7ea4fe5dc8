import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import sluice
from sluice.safetensors import parse
from sluicebin import sluice_bin

try:
    import torch
    import torchvision.transforms as T
    from PIL import Image
except ImportError:  # the translation needs torchvision to be tested at all
    T = None

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def psnr(a, b):
    """PSNR in dB of two images with values in [0, 1]."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def photo(seed, w, h):
    """A smooth image with some texture, like a photo (noise alone would
    make every JPEG comparison a comparison of artefacts)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0, 6)
        img[..., c] = 127 + 90 * np.sin(x * fx + ph) * np.cos(y * fy + c)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@unittest.skipIf(T is None, "torchvision not installed")
class FromTorchvisionTest(unittest.TestCase):
    def test_train_compose(self):
        t = T.Compose([T.RandomResizedCrop(224, scale=(0.25, 1)), T.RandomHorizontalFlip(),
                       T.ColorJitter(0.4, 0.3, 0.2), T.ToTensor(), T.Normalize(MEAN, STD)])
        spec = sluice.from_torchvision(t, name="train")
        self.assertEqual(spec, "\n".join([
            'name: "train"',
            'label: {member: "cls"}',
            "ops:",
            "  - decode",
            "  - {op: random_resized_crop, size: 224, scale: [0.25, 1.0], ratio: [0.75, 1.3333333333333333]}",
            "  - {op: random_horizontal_flip, p: 0.5}",
            "  - {op: color_jitter, brightness: 0.4, contrast: 0.3, saturation: 0.2}",
            '  - {op: normalize, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], dtype: "f32"}',
        ]) + "\n")

    def test_eval_compose_and_variants(self):
        cases = [
            (T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
             ["{op: resize, size: 256}", "{op: center_crop, size: 224}", "{op: normalize, mean: [0.485"]),
            (T.Compose([T.Resize([160]), T.CenterCrop((128, 128))]),  # no ToTensor: uint8 HWC
             ["{op: resize, size: 160}", "{op: center_crop, size: 128}", "- to_uint8_hwc"]),
            (T.Compose([T.Compose([T.CenterCrop(64)]), T.ToTensor()]),  # nested; ToTensor alone
             ["{op: center_crop, size: 64}", "{op: normalize, mean: [0.0, 0.0, 0.0], std: [1.0, 1.0, 1.0]"]),
            (T.ColorJitter(brightness=(0.5, 1.5)), ["{op: color_jitter, brightness: 0.5}"]),
            (T.Compose([T.ToTensor(), T.Normalize([0.5], [0.25])]), ["mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]"]),
        ]
        for t, want in cases:
            with self.subTest(str(t)):
                spec = sluice.from_torchvision(t, label=None, dtype="f16" if "ToTensor" in str(t) else "f32")
                self.assertNotIn("label:", spec)
                for w in want:
                    self.assertIn(w, spec)
        self.assertIn("reduced_decode: false", sluice.from_torchvision(T.RandomResizedCrop(32), reduced_decode=False))

    def test_unsupported_transforms_are_named(self):
        near = T.InterpolationMode.NEAREST
        cases = [
            (T.Compose([T.Resize(256), T.GaussianBlur(3)]), "GaussianBlur", None),
            (T.Resize((200, 100)), "Resize", "size"),
            (T.Resize(256, max_size=300), "Resize", "max_size"),
            (T.Resize(256, interpolation=near), "Resize", "interpolation"),
            (T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC), "RandomResizedCrop", "interpolation"),
            (T.RandomResizedCrop(224, antialias=False), "RandomResizedCrop", "antialias"),
            (T.RandomResizedCrop((224, 200)), "RandomResizedCrop", "size"),
            (T.CenterCrop((10, 20)), "CenterCrop", "size"),
            (T.ColorJitter(hue=0.1), "ColorJitter", "hue"),
            (T.ColorJitter(brightness=(0.2, 1.3)), "ColorJitter", "brightness"),
            (T.ColorJitter(contrast=1.5), "ColorJitter", "contrast"),
            (T.Normalize(MEAN, STD), "Normalize", None),
            (T.Compose([T.ToTensor(), T.RandomHorizontalFlip()]), "RandomHorizontalFlip", None),
            (T.Compose([T.ToTensor(), T.Normalize([0.1, 0.2], [1, 1])]), "Normalize", "mean"),
            (T.Lambda(lambda x: x), "Lambda", None),
        ]
        for t, transform, argument in cases:
            with self.subTest(f"{transform}.{argument}"):
                with self.assertRaises(sluice.UnsupportedTransform) as cm:
                    sluice.from_torchvision(t)
                e = cm.exception
                self.assertEqual((e.transform, e.argument), (transform, argument))
                self.assertTrue(str(e).startswith(transform if argument is None else f"{transform}({argument}=...)"), str(e))
                self.assertIsInstance(e, ValueError)


@unittest.skipIf(T is None, "torchvision not installed")
class AgainstTorchvisionTest(unittest.TestCase):
    """Sluice's output (`sluice fn apply` with the translated spec) against
    torchvision's own on the same JPEG files."""

    @classmethod
    def setUpClass(cls):
        cls.bin = sluice_bin()
        cls.dir = tempfile.TemporaryDirectory(prefix="sluice-tv-")
        cls.imgs = os.path.join(cls.dir.name, "imgs")
        os.mkdir(cls.imgs)
        sizes = [(400, 300), (300, 420), (333, 250), (256, 256), (500, 500), (240, 230)]
        for i, (w, h) in enumerate(sizes):
            Image.fromarray(photo(i, w, h)).save(os.path.join(cls.imgs, f"{i:04d}.jpg"), quality=90)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def apply(self, transform, **kw):
        spec = sluice.from_torchvision(transform, label=None, **kw)
        out = os.path.join(self.dir.name, "out.safetensors")
        r = subprocess.run([self.bin, "fn", "apply", "--pipeline", spec, "--input", self.imgs, "--output", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            tensors, meta = parse(bytearray(f.read()))
        return dict(zip(json.loads(meta["keys"]), tensors["image"]))

    def torchvision(self, transform, key):
        with Image.open(os.path.join(self.imgs, key + ".jpg")) as im:
            return transform(im.convert("RGB")).numpy()

    def compare(self, transform, min_db=30.0, **kw):
        got = self.apply(transform, **kw)
        self.assertEqual(len(got), 6)
        mean, std = np.array(MEAN).reshape(3, 1, 1), np.array(STD).reshape(3, 1, 1)
        for key, img in got.items():
            want = self.torchvision(transform, key)
            self.assertEqual(img.shape, want.shape)
            self.assertEqual(img.dtype, np.float32)
            db = psnr(img * std + mean, want * std + mean)  # on ToTensor's [0, 1] scale
            with self.subTest(key=key):
                self.assertGreaterEqual(db, min_db, f"{key}: {db:.1f} dB")

    def test_eval(self):
        self.compare(T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]))

    def test_train_made_deterministic(self):
        # The whole (square-cropped) image, always flipped: the random ops'
        # geometry and the flip, without their randomness.
        t = T.Compose([T.CenterCrop(230), T.RandomResizedCrop(224, scale=(1, 1), ratio=(1, 1)),
                       T.RandomHorizontalFlip(p=1.0), T.ToTensor(), T.Normalize(MEAN, STD)])
        self.compare(t, reduced_decode=False)

    def test_train_runs(self):
        t = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4),
                       T.ToTensor(), T.Normalize(MEAN, STD)])
        got = self.apply(t, dtype="f16")
        for img in got.values():
            self.assertEqual((img.shape, img.dtype), ((3, 96, 96), np.float16))
            self.assertTrue(np.isfinite(img).all())


if __name__ == "__main__":
    unittest.main()
