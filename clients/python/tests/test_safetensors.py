import json
import struct
import unittest

import numpy as np

from sluice import CorruptBatch
from sluice.safetensors import encode, parse


class TestParse(unittest.TestCase):
    def test_round_trip_views_the_buffer(self):
        img = np.arange(2 * 3 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3, 3)
        lbl = np.array([7, -1], dtype=np.int64)
        f16 = np.array([[0.5, -2]], dtype=np.float16)
        buf = bytearray(encode({"image": img, "label": lbl, "h": f16}, {"job": "j", "keys": "[]"}))
        tensors, meta = parse(buf)
        self.assertEqual(meta, {"job": "j", "keys": "[]"})
        np.testing.assert_array_equal(tensors["image"], img)
        np.testing.assert_array_equal(tensors["label"], lbl)
        np.testing.assert_array_equal(tensors["h"], f16)
        self.assertEqual(tensors["label"].dtype, np.int64)
        # Zero-copy: writing the buffer shows through the arrays.
        self.assertTrue(tensors["image"].flags.writeable)
        whole = np.frombuffer(buf, np.uint8)
        self.assertTrue(np.shares_memory(tensors["image"], whole))
        tensors["image"][0, 0, 0, 0] = 99
        self.assertEqual(parse(buf)[0]["image"][0, 0, 0, 0], 99)
        # label starts at byte 54 of the data: not 8-aligned, so it was
        # copied rather than viewed unaligned.
        self.assertFalse(np.shares_memory(tensors["label"], whole))
        # The data starts 8-byte aligned in the file, as Sluice writes it.
        (n,) = struct.unpack_from("<Q", buf)
        self.assertEqual((8 + n) % 8, 0)

    def test_zero_rows(self):
        buf = bytearray(encode({"image": np.zeros((0, 4, 4, 3), np.uint8), "label": np.zeros((0,), np.int64)}))
        tensors, _ = parse(buf)
        self.assertEqual(tensors["image"].shape, (0, 4, 4, 3))
        self.assertEqual(tensors["label"].shape, (0,))

    def test_unaligned_tensor_is_copied_aligned(self):
        head = json.dumps({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                           "b": {"dtype": "I64", "shape": [1], "data_offsets": [1, 9]}}).encode()
        head += b" " * (-(8 + len(head)) % 8)
        buf = bytearray(struct.pack("<Q", len(head)) + head + b"\x05" + struct.pack("<q", -3))
        tensors, _ = parse(buf)
        self.assertEqual(tensors["b"][0], -3)
        self.assertEqual(tensors["a"][0], 5)

    def test_corrupt(self):
        good = encode({"x": np.zeros((2, 2), np.float32)}, {"job": "j"})
        n = struct.unpack_from("<Q", good)[0]
        cases = {
            "short": (good[:5], "shorter than the 8-byte header length"),
            "length": (struct.pack("<Q", 1 << 40) + good[8:], "does not fit"),
            "not json": (struct.pack("<Q", 4) + b"{{{{", "not JSON"),
            "not object": (struct.pack("<Q", 2) + b"[]", "not an object"),
            "truncated data": (good[:-4], "offsets [0,16) do not match F32[2, 2] in 12 data bytes"),
            "dtype": (good.replace(b'"F32"', b'"F99"'), "dtype 'F99' is not one of"),
            "metadata": (self._with_header({"__metadata__": {"job": 1}}), "__metadata__ is not a map of strings"),
        }
        for name, (data, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(CorruptBatch) as cm:
                    parse(bytearray(data))
                self.assertIn(want, str(cm.exception))
        del n

    def test_malformed_header_is_corrupt_batch(self):
        # Every malformed header is a CorruptBatch naming what was wrong;
        # no other exception (OverflowError, RecursionError, ValueError
        # from numpy) escapes.
        x = lambda **kw: {"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], **kw}}
        deep = 100_000
        cases = {
            "infinite dimension": (b'{"x":{"dtype":"U8","shape":[Infinity],"data_offsets":[0,0]}}', "shape [inf] is not a list of at most 32 non-negative integers"),
            "NaN dimension": (b'{"x":{"dtype":"U8","shape":[NaN],"data_offsets":[0,0]}}', "shape [nan] is not a list"),
            "float dimension": (x(shape=[1.0]), "shape [1.0] is not a list"),
            "string dimension": (x(shape=["1"]), "shape ['1'] is not a list"),
            "bool dimension": (x(shape=[True]), "shape [True] is not a list"),
            "negative dimension": (x(shape=[-1]), "shape [-1] is not a list"),
            "too many dimensions": (x(shape=[1] * 33), "at most 32"),
            "shape not a list": (x(shape=3), "shape 3 is not a list"),
            "empty but too wide": (x(shape=[1 << 70, 0], data_offsets=[0, 0]), "spans more than"),
            "empty but too wide together": (x(shape=[1 << 40, 1 << 40, 0], data_offsets=[0, 0]), "spans more than"),
            "product over the data": (x(shape=[1 << 30, 1 << 30]), "offsets [0,1) do not match U8[1073741824, 1073741824] in 1 data bytes"),
            "float offsets": (x(data_offsets=[0.0, 1.0]), "data_offsets [0.0, 1.0] is not a pair of integers"),
            "three offsets": (x(data_offsets=[0, 1, 1]), "is not a pair"),
            "offsets reversed": (x(data_offsets=[1, 0]), "is not a pair"),
            "dtype not a string": (x(dtype=["U8"]), "dtype ['U8'] is not one of"),
            "entry not an object": ({"x": [1, 2]}, "entry is a JSON list, not an object"),
            "metadata not an object": ({"__metadata__": 0}, "__metadata__ is not a map of strings: 0"),
            "deep metadata": (b'{"__metadata__":' + b"[" * deep + b"]" * deep + b"}", "nests deeper than the recursion limit"),
            "deep entry": (b'{"x":' + b'{"a":' * deep + b"1" + b"}" * deep + b"}", "nests deeper"),
            "nested metadata": ({"__metadata__": {"a": [[[[["b"]]]]]}}, "__metadata__ is not a map of strings: {'a': [[...]]}"),
        }
        for name, (header, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(CorruptBatch) as cm:
                    parse(bytearray(self._with_header(header) + b"\0"))
                self.assertIn(want, str(cm.exception))

    def test_error_quotes_a_bounded_part_of_a_huge_value(self):
        name = "n" * (1 << 20)
        with self.assertRaises(CorruptBatch) as cm:
            parse(bytearray(self._with_header({name: {"dtype": "U8", "shape": [1] * 100_000, "data_offsets": [0, 1]}}) + b"\0"))
        self.assertLess(len(str(cm.exception)), 500)

    @staticmethod
    def _with_header(h):
        b = h if isinstance(h, bytes) else json.dumps(h).encode()
        return struct.pack("<Q", len(b)) + b


if __name__ == "__main__":
    unittest.main()
