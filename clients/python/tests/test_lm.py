import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import numpy as np

try:
    import torch

    from sluice.lm import IGNORE_INDEX, causal_document_mask, document_ids, next_token_labels, varlen_cu_seqlens
except ImportError:
    torch = None

from fakeagent import FakeAgent
from sluice.safetensors import parse
from sluicebin import sluice_bin

HERE = os.path.dirname(os.path.abspath(__file__))


def rows():
    """The three rows Go's TestPackerRowsByValue packs documents [1 2],
    [3 4 5 6 7], [8] into (seq_len 4, EOS 9, tail pad with 0)."""
    return {
        "input_ids": torch.tensor([[1, 2, 9, 3], [4, 5, 6, 7], [9, 8, 9, 0]], dtype=torch.int32),
        "position_ids": torch.tensor([[0, 1, 2, 0], [0, 1, 2, 3], [0, 0, 1, 0]], dtype=torch.int32),
        "cu_seqlens": torch.tensor([[0, 3, 4, 4, 4], [0, 4, 4, 4, 4], [0, 1, 3, 4, 4]], dtype=torch.int32),
        "num_seqs": torch.tensor([2, 1, 3], dtype=torch.int32),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.int32),
    }


@unittest.skipIf(torch is None, "torch not installed")
class PackedRowsTest(unittest.TestCase):
    def test_document_mask(self):
        b = rows()
        self.assertEqual(document_ids(b["position_ids"]).tolist(), [[1, 1, 1, 2], [1, 1, 1, 1], [1, 2, 2, 3]])
        m = causal_document_mask(b["position_ids"])
        self.assertEqual(tuple(m.shape), (3, 1, 4, 4))
        self.assertEqual(m[0, 0].int().tolist(), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]])
        self.assertEqual(m[2, 0].int().tolist(), [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]])

    def test_labels_stay_within_a_sequence(self):
        b = rows()
        x = IGNORE_INDEX
        self.assertEqual(next_token_labels(b["input_ids"], b["position_ids"], b["attention_mask"]).tolist(),
                         [[2, 9, x, x], [5, 6, 7, x], [x, 9, x, x]])

    def test_varlen_cu_seqlens(self):
        b = rows()
        cu, max_len = varlen_cu_seqlens(b["cu_seqlens"], b["num_seqs"])
        self.assertEqual(cu.tolist(), [0, 3, 4, 8, 9, 11, 12])
        self.assertEqual((cu.dtype, max_len), (torch.int32, 4))


def byte_tokenizer_json():
    """synth.ByteTokenizerJSON's tokenizer: every byte its own token, its
    id the byte's value; <|endoftext|> 256."""
    vocab, n = {}, 0
    for b in range(256):
        if (ord("!") <= b <= ord("~")) or (0xA1 <= b <= 0xAC) or (0xAE <= b <= 0xFF):
            r = chr(b)
        else:
            r, n = chr(256 + n), n + 1
        vocab[r] = b
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "decoder": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    })


def pack(test, docs, seq_len):
    """docs packed into rows of seq_len by the real packer (`sluice fn
    apply` with a packing spec and the byte tokenizer): the rows' tensors
    and their keys, in order."""
    d = tempfile.TemporaryDirectory(prefix="sluice-lm-")
    test.addCleanup(d.cleanup)
    vocab = os.path.join(d.name, "vocab")
    os.mkdir(vocab)
    with open(os.path.join(vocab, "tokenizer.json"), "w") as f:
        f.write(byte_tokenizer_json())
    jsonl = os.path.join(d.name, "web-00.jsonl")
    with open(jsonl, "w") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    spec = f"ops:\n  - text\n  - {{op: bpe, tokenizer: tokenizer.json, mode: ids}}\n  - {{op: pack, seq_len: {seq_len}}}\n"
    out = os.path.join(d.name, "rows.safetensors")
    r = subprocess.run([sluice_bin(), "fn", "apply", "--pipeline", spec, "--vocab-dir", vocab, "--input", jsonl,
                        "--output", out], capture_output=True, text=True)
    test.assertEqual(r.returncode, 0, r.stderr)
    with open(out, "rb") as f:
        tensors, meta = parse(bytearray(f.read()))
    keys = json.loads(meta["keys"])
    test.assertEqual(tensors["input_ids"].shape, (len(keys), seq_len))
    return tensors, keys


def serve(test, tensors, keys, batch_size, epochs):
    """A stand-in agent serving the rows in order, batch_size a batch, for
    epochs: its URL and the steps of an epoch."""
    index = {k: i for i, k in enumerate(keys)}

    def batch(ks):
        sel = [index[k] for k in ks]
        return {name: np.ascontiguousarray(t[sel]) for name, t in tensors.items()}

    steps = [keys[i:i + batch_size] for i in range(0, len(keys), batch_size)]
    agent = FakeAgent([steps] * epochs, tensors=batch)
    test.addCleanup(agent.close)
    return agent.url, len(steps)


def import_example():
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import lm_pretrain

    return lm_pretrain


@unittest.skipIf(torch is None, "torch not installed")
class LMPretrainExampleTest(unittest.TestCase):
    """examples/lm_pretrain.py over rows the real packer made (`sluice fn
    apply` with a packing spec), served by a stand-in agent for 2 epochs:
    the loss falls, and every row is read each epoch."""

    def test_trains_on_packed_rows(self):
        docs = [("the cat sat on the mat. " * (1 + i % 4)) + f"doc {i}." for i in range(48)]
        tensors, keys = pack(self, docs, 128)
        # Every document's bytes, EOS after each, in the rows in order.
        real = tensors["input_ids"][tensors["attention_mask"] == 1]
        self.assertEqual(bytes(real[real != 256].astype(np.uint8)).decode(), "".join(docs))
        self.assertEqual(int((real == 256).sum()), len(docs))

        url, steps = serve(self, tensors, keys, 4, 2)
        lm_pretrain = import_example()
        torch.set_num_threads(1)
        model, losses = lm_pretrain.train(url, vocab_size=257, epochs=2, log=lambda *a: None,
                                          timeout=10, connect_timeout=1)
        self.assertEqual(len(losses), 2 * steps)
        self.assertLess(sum(losses[-3:]) / 3, losses[0] * 0.6, losses)

    @unittest.skipIf(torch is not None and not hasattr(torch.nn.functional, "scaled_dot_product_attention"),
                     "torch < 2.0 has no scaled_dot_product_attention (its masked softmax takes about 15 s a step on rows of 2,048)")
    def test_trains_rows_of_2048_with_sdpa(self):
        """lm-pretrain's row length: every attention of every step is SDPA's,
        over all 2,048 positions, and the loss falls."""
        docs = [("the cat sat on the mat. " * (1 + i % 40)) + f"doc {i}." for i in range(40)]
        tensors, keys = pack(self, docs, 2048)
        self.assertGreaterEqual(len(keys), 8)
        url, _ = serve(self, tensors, keys, 2, 1)
        lm_pretrain = import_example()
        self.assertTrue(lm_pretrain.SDPA)
        torch.set_num_threads(1)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", wraps=sdpa) as calls:
            model, losses = lm_pretrain.train(url, vocab_size=257, max_steps=4, log=lambda *a: None,
                                              timeout=30, connect_timeout=1)
        self.assertEqual(len(losses), 4)
        self.assertEqual(model.pos.num_embeddings, 2048)
        self.assertEqual(calls.call_count, 4 * len(model.blocks))
        for c in calls.call_args_list:
            q, mask = c.args[0], c.kwargs["attn_mask"]
            self.assertEqual((tuple(q.shape), tuple(mask.shape)), ((2, 4, 2048, 16), (2, 1, 2048, 2048)))
        self.assertLess(losses[-1], losses[0] * 0.9, losses)


@unittest.skipIf(torch is None, "torch not installed")
class AttentionTest(unittest.TestCase):
    @unittest.skipIf(torch is not None and not hasattr(torch.nn.functional, "scaled_dot_product_attention"),
                     "torch < 2.0 has no scaled_dot_product_attention to compare with")
    def test_sdpa_is_the_masked_softmax(self):
        """The example's two attentions (SDPA on torch >= 2.0, the masked
        softmax on 1.13) agree, values and gradients, on the document mask
        of the Go packer's rows."""
        attend = import_example().attend
        mask = causal_document_mask(rows()["position_ids"])
        g = torch.Generator().manual_seed(1)
        qkv = [torch.randn(3, 2, 4, 8, generator=g, dtype=torch.float64) for _ in range(3)]
        out = {}
        for sdpa in (True, False):
            leaves = [t.clone().requires_grad_() for t in qkv]
            a = attend(*leaves, mask, sdpa=sdpa)
            (a * torch.arange(a.numel(), dtype=a.dtype).view(a.shape)).sum().backward()
            out[sdpa] = [a.detach()] + [t.grad for t in leaves]
        for x, y in zip(out[True], out[False]):
            torch.testing.assert_close(x, y)
        # Row 2's second token is a one-token document: it sees only itself.
        torch.testing.assert_close(out[True][0][2, :, 1], qkv[2][2, :, 1])


if __name__ == "__main__":
    unittest.main()
