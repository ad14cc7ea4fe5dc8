"""Zero-copy parsing of a safetensors body: numpy arrays that view the
buffer the response was read into.

The format: an 8-byte little-endian header length n, n bytes of JSON (each
tensor's dtype, shape and [begin, end) data offsets, and an optional
"__metadata__" map of strings), then the tensor bytes. Sluice pads the
header so the data starts 8-byte aligned.
"""

import json
import reprlib
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

# The most dimensions a tensor may have: numpy's own limit (before numpy 2).
MAX_DIMS = 32

# The most bytes a shape may span, counting a zero dimension as one: what
# numpy can index. A shape beyond it cannot be viewed even when it holds
# no bytes.
MAX_EXTENT = int(np.iinfo(np.intp).max)

# Quotes a bad value in an error message without its whole size or depth.
_quote = reprlib.Repr()
_quote.maxlevel = 2
_quote.maxstring = _quote.maxother = 60
_quote.maxlist = _quote.maxdict = 8


def parse(buf, what="batch"):
    """Parses buf (a bytearray, bytes or memoryview holding a whole
    safetensors file) into ({name: ndarray}, metadata). The arrays view buf:
    no tensor byte is copied, unless a tensor's offset is not a multiple
    of its element size (never in Sluice's files), where that one is copied
    to be aligned. Raises CorruptBatch naming the problem, and nothing
    else, whatever the bytes."""
    mv = memoryview(buf).cast("B")
    size = len(mv)
    if size < 8:
        raise CorruptBatch(f"{what}: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > MAX_HEADER or n > size - 8:
        raise CorruptBatch(f"{what}: header length {n} does not fit in {size} bytes (at most {MAX_HEADER})")
    try:
        header = json.loads(bytes(mv[8 : 8 + n]))
    except RecursionError:
        # json's decoder bounds nesting by the interpreter's recursion
        # limit, and says so with RecursionError.
        raise CorruptBatch(f"{what}: header nests deeper than the recursion limit (a safetensors header nests 3 levels)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptBatch(f"{what}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise CorruptBatch(f"{what}: header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CorruptBatch(f"{what}: __metadata__ is not a map of strings: {_quote.repr(meta)}")
    start = 8 + n
    data_len = size - start
    tensors = {}
    for name, e in header.items():
        where = f"{what}: tensor {_quote.repr(name)}"
        dtype, shape, lo, hi = _entry(e, where)
        count = 1
        for d in shape:
            count *= d
        if hi > data_len or hi - lo != count * dtype.itemsize:
            raise CorruptBatch(f"{where}: offsets [{lo},{hi}) do not match {e['dtype']}{list(shape)} in {data_len} data bytes")
        arr = np.frombuffer(mv, dtype=dtype, count=count, offset=start + lo)
        if (start + lo) % dtype.itemsize:
            arr = arr.copy()
        tensors[name] = arr.reshape(shape)
    return tensors, meta


def _entry(e, where):
    """Checks one tensor's header entry; returns its numpy dtype, shape
    and data offsets, or raises CorruptBatch naming what is wrong."""
    if not isinstance(e, dict):
        raise CorruptBatch(f"{where}: entry is a JSON {type(e).__name__}, not an object with dtype, shape and data_offsets")
    code, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(code, str) or code not in DTYPES:
        raise CorruptBatch(f"{where}: dtype {_quote.repr(code)} is not one of {', '.join(DTYPES)}")
    dtype = DTYPES[code]
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_int(d) and d >= 0 for d in shape):
        raise CorruptBatch(f"{where}: shape {_quote.repr(shape)} is not a list of at most {MAX_DIMS} non-negative integers")
    extent = dtype.itemsize
    for d in shape:
        extent *= max(d, 1)
        if extent > MAX_EXTENT:
            raise CorruptBatch(f"{where}: shape {_quote.repr(shape)} of {code} spans more than {MAX_EXTENT} bytes")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(x) for x in offsets) or not 0 <= offsets[0] <= offsets[1]:
        raise CorruptBatch(f"{where}: data_offsets {_quote.repr(offsets)} is not a pair of integers 0 <= begin <= end")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _is_int(x):
    # JSON true and false are Python bools, which are ints.
    return isinstance(x, int) and not isinstance(x, bool)


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
