"""from_torchvision: a torchvision.transforms.Compose as a Sluice pipeline
spec, so that a training script's preprocessing moves out of the loop.

What maps (torchvision 0.14 names -> Sluice ops; `sluice fn apply --list`
lists the ops):

    RandomResizedCrop(size, scale, ratio)  -> random_resized_crop
    Resize(size)  (an int: the shorter side) -> resize
    CenterCrop(size)                       -> center_crop
    RandomHorizontalFlip(p)                -> random_horizontal_flip
    ColorJitter(brightness, contrast, saturation) -> color_jitter
    ToTensor() [+ Normalize(mean, std)]    -> normalize (float32 CHW)
    no ToTensor at the end                 -> to_uint8_hwc (uint8 HWC)

and where the outputs differ from torchvision's on the same file:

- Randomness: the same distributions, drawn from each sample's own
  generator (seeded from the job seed, the epoch and the sample key), not
  from torch's: a crop is reproducible across runs and replicas, but not
  the crop torchvision would have drawn.
- Resizing is PIL's antialiased bilinear filter (what torchvision uses on
  PIL images, which ImageFolder gives), so interpolation must be bilinear
  and antialias None or True.
- Decoding: random_resized_crop decodes only the crop's region and, by
  default, at a reduced DCT scale (reduced_decode), which is faster and not
  pixel-identical to PIL's full decode; pass reduced_decode=False for
  output that matches torchvision's (bit for bit in the turbojpeg build,
  40+ dB in the pure-Go one). resize decodes at full scale unless
  reduced_decode=True.
- ColorJitter: brightness, contrast and saturation as PIL's ImageEnhance
  does them, in a random order; hue has no Sluice op.
- Normalize's output is float32 (or float16 with dtype="f16", which
  torchvision has no transform for), [3,H,W] per sample as ToTensor's.

Anything else raises UnsupportedTransform naming the transform and the
argument.
"""

import json
import math

from .errors import UnsupportedTransform


def from_torchvision(transform, name="from-torchvision", label="cls", dtype="f32", reduced_decode=None):
    """Returns the pipeline spec (YAML text) for a torchvision transform:
    a Compose (nested ones are flattened) or a single transform.

    label: the member holding each sample's class ("cls", as WebDataset
    ImageNet shards have it), or None for unlabelled data. dtype: "f32" or
    "f16", the element type Normalize/ToTensor outputs. reduced_decode:
    None keeps each op's default (random_resized_crop decodes at a reduced
    DCT scale, resize does not); True or False sets it on both."""
    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype {dtype!r}: want 'f32' or 'f16'")
    ops = [{"op": "decode"}]
    tensor = None  # the ToTensor/Normalize op once met
    for t in _flatten(transform):
        cls = type(t).__name__
        if tensor is not None and cls != "Normalize":
            raise UnsupportedTransform(cls, None, "comes after ToTensor/Normalize: Sluice's image ops work on images, "
                                       "and normalize must be the last op")
        if cls == "RandomResizedCrop":
            _bilinear(t, cls)
            op = {"op": "random_resized_crop", "size": _square(t.size, cls, "size"),
                  "scale": [float(x) for x in t.scale], "ratio": [float(x) for x in t.ratio]}
            if not (0 < op["scale"][0] <= op["scale"][1] <= 1):
                raise UnsupportedTransform(cls, "scale", f"{t.scale}: Sluice takes 0 < min <= max <= 1")
            if not (0 < op["ratio"][0] <= op["ratio"][1] <= 100):
                raise UnsupportedTransform(cls, "ratio", f"{t.ratio}: Sluice takes 0 < min <= max <= 100")
            if reduced_decode is not None:
                op["reduced_decode"] = bool(reduced_decode)
            ops.append(op)
        elif cls == "Resize":
            _bilinear(t, cls)
            if getattr(t, "max_size", None) is not None:
                raise UnsupportedTransform(cls, "max_size", f"{t.max_size}: Sluice's resize has no cap on the longer side")
            size = t.size
            if isinstance(size, (list, tuple)):
                if len(size) != 1:
                    raise UnsupportedTransform(cls, "size", f"{list(size)}: Sluice resizes the shorter side to one length "
                                               "(an int), keeping the aspect ratio; (h, w) has no op")
                size = size[0]
            op = {"op": "resize", "size": _int(size, cls, "size")}
            if reduced_decode is not None:
                op["reduced_decode"] = bool(reduced_decode)
            ops.append(op)
        elif cls == "CenterCrop":
            ops.append({"op": "center_crop", "size": _square(t.size, cls, "size")})
        elif cls == "RandomHorizontalFlip":
            p = float(t.p)
            if not 0 <= p <= 1:
                raise UnsupportedTransform(cls, "p", f"{t.p}: want 0..1")
            ops.append({"op": "random_horizontal_flip", "p": p})
        elif cls == "ColorJitter":
            if t.hue is not None and tuple(t.hue) != (0, 0):
                raise UnsupportedTransform(cls, "hue", f"{tuple(t.hue)}: Sluice's color_jitter has no hue")
            op = {"op": "color_jitter"}
            for arg in ("brightness", "contrast", "saturation"):
                x = _jitter(getattr(t, arg), cls, arg)
                if x:
                    op[arg] = x
            if len(op) > 1:
                ops.append(op)
        elif cls == "ToTensor":
            tensor = {"op": "normalize", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0], "dtype": dtype}
            ops.append(tensor)
        elif cls == "Normalize":
            if tensor is None:
                raise UnsupportedTransform(cls, None, "without ToTensor before it: Normalize works on tensors")
            if tensor["mean"] != [0.0, 0.0, 0.0] or tensor["std"] != [1.0, 1.0, 1.0]:
                raise UnsupportedTransform(cls, None, "a second Normalize: Sluice's normalize takes one mean and std")
            tensor["mean"] = _channels(t.mean, cls, "mean")
            tensor["std"] = _channels(t.std, cls, "std")
            if any(s <= 0 for s in tensor["std"]):
                raise UnsupportedTransform(cls, "std", f"{t.std}: want each > 0")
        else:
            raise UnsupportedTransform(cls, None, "no Sluice op does this transform (Sluice has RandomResizedCrop, Resize, "
                                       "CenterCrop, RandomHorizontalFlip, ColorJitter, ToTensor, Normalize)")
    if tensor is None:
        ops.append({"op": "to_uint8_hwc"})
    return _yaml(name, label, ops)


def _flatten(t):
    if type(t).__name__ == "Compose":
        for s in t.transforms:
            yield from _flatten(s)
    else:
        yield t


def _bilinear(t, cls):
    mode = getattr(t, "interpolation", None)
    value = getattr(mode, "value", mode)
    if value not in ("bilinear", 2):  # InterpolationMode.BILINEAR, or PIL's Image.BILINEAR
        raise UnsupportedTransform(cls, "interpolation", f"{mode}: Sluice resizes with PIL's bilinear filter only")
    if getattr(t, "antialias", None) is False:
        raise UnsupportedTransform(cls, "antialias", "False: Sluice always antialiases, as PIL does "
                                   "(leave it None or True; on PIL images torchvision antialiases anyway)")


def _int(v, cls, arg):
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 8192:
        raise UnsupportedTransform(cls, arg, f"{v!r}: want an int in 1..8192")
    return v


def _square(size, cls, arg):
    if isinstance(size, (list, tuple)):
        if len(size) == 1 or (len(size) == 2 and size[0] == size[1]):
            return _int(size[0], cls, arg)
        raise UnsupportedTransform(cls, arg, f"{list(size)}: Sluice crops squares only (h == w)")
    return _int(size, cls, arg)


def _jitter(r, cls, arg):
    """torchvision keeps a jitter as its [lo, hi] range; Sluice takes x with
    the range [max(0, 1-x), 1+x], 0 <= x <= 1."""
    if r is None:
        return 0.0
    lo, hi = float(r[0]), float(r[1])
    x = hi - 1
    if lo == hi == 1:
        return 0.0
    if not (0 <= x <= 1) or not math.isclose(lo, max(0.0, 1 - x), abs_tol=1e-9):
        raise UnsupportedTransform(cls, arg, f"range [{lo}, {hi}]: Sluice takes a jitter x in 0..1, "
                                   "the range [max(0, 1-x), 1+x]")
    return round(x, 12)


def _channels(v, cls, arg):
    vals = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    if len(vals) == 1:
        vals *= 3
    if len(vals) != 3:
        raise UnsupportedTransform(cls, arg, f"{list(v)}: want 3 channels (R, G, B) or one value")
    return vals


def _yaml(name, label, ops):
    lines = [f"name: {json.dumps(name)}"]
    if label:
        lines.append(f"label: {{member: {json.dumps(label)}}}")
    lines.append("ops:")
    for op in ops:
        if len(op) == 1:
            lines.append(f"  - {op['op']}")
            continue
        params = ", ".join(f"{k}: {json.dumps(v)}" for k, v in op.items() if k != "op")
        lines.append(f"  - {{op: {op['op']}, {params}}}")
    return "\n".join(lines) + "\n"
