#!/usr/bin/python3
"""Single-thread throughput of torchvision's ImageNet training transforms.

The baseline Sluice's `sluice bench ops --pipeline imagenet-train` is
compared against (bench/compare.sh runs both): for each JPEG, PIL decodes it
(libjpeg-turbo underneath) and torchvision applies

    RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
    Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])

which is what a PyTorch DataLoader worker does per sample. The files are read
into memory first, so only decode + transform is timed, as on the Go side.
Runs on one thread (torch.set_num_threads(1)); pin the process to one core
with taskset for a per-core figure. Prints one JSON object.

Usage: /usr/bin/python3 bench/torchvision_bench.py DIR [--seconds N]
"""

import argparse
import glob
import io
import json
import os
import platform
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory of .jpg files")
    ap.add_argument("--seconds", type=float, default=10.0, help="time budget of the measurement")
    ap.add_argument("--mode", choices=["train", "eval"], default="train",
                    help="train: RandomResizedCrop+flip; eval: Resize(256)+CenterCrop(224)")
    args = ap.parse_args()

    import torch
    import torchvision
    from PIL import Image, features
    from torchvision import transforms as T

    torch.set_num_threads(1)
    torch.manual_seed(0)

    paths = sorted(glob.glob(os.path.join(args.dir, "*.jpg")))
    if not paths:
        sys.exit(f"torchvision_bench: no .jpg files in {args.dir}")
    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())

    norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if args.mode == "train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])

    def one(b):
        # What torchvision's ImageFolder loader does: open, convert("RGB").
        img = Image.open(io.BytesIO(b)).convert("RGB")
        return tf(img)

    # Warm-up: one pass over the files (also checks that each decodes).
    for b in blobs:
        out = one(b)
        assert tuple(out.shape) == (3, 224, 224), out.shape

    n = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while True:
        for b in blobs:
            one(b)
            n += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - start

    print(json.dumps({
        "pipeline": f"torchvision-{args.mode}",
        "files": len(blobs),
        "samples": n,
        "seconds": round(elapsed, 3),
        "samples_per_s_per_core": round(n / elapsed, 1),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": Image.__version__,
        "pillow_libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }))


if __name__ == "__main__":
    main()
