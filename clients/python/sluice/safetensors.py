"""Zero-copy parsing of a safetensors body: numpy arrays that view the
buffer the response was read into.

The format: an 8-byte little-endian header length n, n bytes of JSON (each
tensor's dtype, shape and [begin, end) data offsets, and an optional
"__metadata__" map of strings), then the tensor bytes. Sluice pads the
header so the data starts 8-byte aligned.
"""

import json
import struct

import numpy as np

from .errors import CorruptBatch

# The dtypes Sluice produces, and the few others the format names that
# numpy has, little-endian.
DTYPES = {
    "BOOL": np.dtype("bool"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
}

# As the Go reader: a corrupt length must not make us parse 100s of MB.
MAX_HEADER = 100 << 20


def parse(buf, what="batch"):
    """Parses buf (a bytearray, bytes or memoryview holding a whole
    safetensors file) into ({name: ndarray}, metadata). The arrays view buf:
    no tensor byte is copied, unless a tensor's offset is not a multiple
    of its element size (never in Sluice's files), where that one is copied
    to be aligned. Raises CorruptBatch naming the problem."""
    mv = memoryview(buf).cast("B")
    size = len(mv)
    if size < 8:
        raise CorruptBatch(f"{what}: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > MAX_HEADER or n > size - 8:
        raise CorruptBatch(f"{what}: header length {n} does not fit in {size} bytes")
    try:
        header = json.loads(bytes(mv[8 : 8 + n]))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptBatch(f"{what}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise CorruptBatch(f"{what}: header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CorruptBatch(f"{what}: __metadata__ is not a map of strings")
    start = 8 + n
    data_len = size - start
    tensors = {}
    for name, e in header.items():
        try:
            dtype = DTYPES[e["dtype"]]
            shape = tuple(int(d) for d in e["shape"])
            lo, hi = (int(x) for x in e["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CorruptBatch(f"{what}: tensor {name!r}: want dtype (one of {', '.join(DTYPES)}), shape and data_offsets, got {e!r}") from None
        count = 1
        for d in shape:
            if d < 0:
                raise CorruptBatch(f"{what}: tensor {name!r}: negative dimension in shape {list(shape)}")
            count *= d
        if lo < 0 or hi < lo or hi > data_len or hi - lo != count * dtype.itemsize:
            raise CorruptBatch(
                f"{what}: tensor {name!r}: offsets [{lo},{hi}) do not match {e['dtype']}{list(shape)} in {data_len} data bytes"
            )
        arr = np.frombuffer(mv, dtype=dtype, count=count, offset=start + lo)
        if (start + lo) % dtype.itemsize:
            arr = arr.copy()
        tensors[name] = arr.reshape(shape)
    return tensors, meta


def encode(tensors, metadata=None):
    """Encodes {name: ndarray} (in the order given) and string metadata as a
    safetensors file, laid out as Sluice's Go writer does. For tests and
    tools; the client only reads."""
    codes = {v: k for k, v in DTYPES.items()}
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    off = 0
    blobs = []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        b = a.astype(dt, copy=False).tobytes()
        header[name] = {"dtype": codes[np.dtype(dt)], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)
