"""The harness's own checks on small fixtures (no venv, no peers):
python3 -m unittest discover -s bench/peers -p 'test_*.py'."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402
import lm_systems  # noqa: E402

MANIFEST = {"keys": ["00000000", "00000001", "00000002", "00000003", "00000004"], "labels": [7, 8, 9, 7, 8]}


def result(epochs, shapes=None, dtypes=("uint8",)):
    keys = [[0, 1, 2, 3, 4][::-1] if e % 2 else [0, 1, 2, 3, 4] for e in range(epochs)]
    labels = [[{0: 7, 1: 8, 2: 9, 3: 7, 4: 8}[k] for k in ks] for ks in keys]
    return {"keys": keys, "labels": labels, "dtypes": list(dtypes),
            "shapes": shapes or {"[2, 224, 224, 3]": 2 * epochs, "[1, 224, 224, 3]": epochs}}


class CheckImages(unittest.TestCase):
    def test_good_run_passes(self):
        self.assertEqual(check.check_images(result(2), MANIFEST, 2, 2, "uint8"), [])

    def test_missing_and_repeated_samples(self):
        r = result(2)
        r["keys"][1] = [0, 1, 2, 3, 3]
        r["labels"][1] = [7, 8, 9, 7, 7]
        p = check.check_images(r, MANIFEST, 2, 2, "uint8")
        self.assertEqual(len(p), 1)
        self.assertIn("epoch 1: 5 samples, 1 missing, 1 repeated", p[0])

    def test_wrong_label(self):
        r = result(1)
        r["labels"][0][2] = 0
        self.assertIn("1 labels not the sample's", check.check_images(r, MANIFEST, 1, 2, "uint8")[0])

    def test_shape_and_dtype(self):
        r = result(1, shapes={"[2, 3, 224, 224]": 2, "[1, 3, 224, 224]": 1}, dtypes=("float32",))
        self.assertEqual(check.check_images(r, MANIFEST, 1, 2, "f32"), [])
        p = check.check_images(r, MANIFEST, 1, 2, "uint8")
        self.assertTrue(any("dtype" in x for x in p))
        self.assertTrue(any("shape [2, 3, 224, 224]" in x for x in p))

    def test_too_many_short_batches(self):
        r = result(1, shapes={"[1, 224, 224, 3]": 5})
        self.assertIn("0 full batches", check.check_images(r, MANIFEST, 1, 2, "uint8")[0])

    def test_missing_epoch(self):
        self.assertIn("1 epochs, want 2", check.check_images(result(1), MANIFEST, 2, 2, "uint8"))


class CompareMeans(unittest.TestCase):
    def test_swapped_channels_flagged(self):
        rows = [{"system": s, "dtype": "uint8", "ok": True, "channel_means": m} for s, m in
                [("a", [120, 110, 100]), ("b", [121, 110, 99]), ("c", [100, 110, 120])]]
        check.compare_means(rows)
        self.assertEqual([r["ok"] for r in rows], [True, True, False])
        self.assertIn("channel means", rows[2]["problems"][0])


class Tokens(unittest.TestCase):
    def test_same_tokenizer_same_ids(self):
        runs = [{"system": "a", "tokenizer": "gpt2", "ok": True, "digest": "x" * 64, "rows": 3, "tokens": 5000},
                {"system": "b", "tokenizer": "gpt2", "ok": True, "digest": "x" * 64, "rows": 3, "tokens": 5000},
                {"system": "c", "tokenizer": "gpt2", "ok": True, "digest": "y" * 64, "rows": 3, "tokens": 5000},
                {"system": "a", "tokenizer": "llama3", "ok": True, "digest": "z" * 64, "rows": 4, "tokens": 7000}]
        check.check_tokens(runs)
        self.assertEqual([r["ok"] for r in runs], [True, True, False, True])
        self.assertIn("ids differ from a's", runs[2]["problems"][0])

    def test_pack_is_lm_pretrain(self):
        import numpy as np
        rows = lm_systems.Rows()
        lm_systems.SEQ, seq = 4, lm_systems.SEQ
        try:
            # EOS (9) after each document unless it ends in one; BOS (1)
            # first; the tail padded with EOS.
            tokens = lm_systems.pack([[5, 6], [7, 9], []], [1], 9, rows, np)
        finally:
            lm_systems.SEQ = seq
        self.assertEqual(tokens, 9)  # 1 5 6 9 | 1 7 9 1 | 9, padded with 9
        self.assertEqual(rows.rows, 3)
        want = lm_systems.Rows()
        for r in ([1, 5, 6, 9], [1, 7, 9, 1], [9, 9, 9, 9]):
            want.add(np.asarray(r, dtype=np.int32).tobytes())
        self.assertEqual(rows.digest(), want.digest())

    def test_tiktoken_file_from_tokenizer_json(self):
        tj = {"model": {"vocab": {"a": 0, "Ġ": 1, "Ġa": 2, "<|endoftext|>": 3}},
              "added_tokens": [{"id": 3, "content": "<|endoftext|>"}],
              "pre_tokenizer": {"type": "ByteLevel"}}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tokenizer.json")
            json.dump(tj, open(path, "w"))
            lm_systems.write_tiktoken(path, d, "t")
            lines = open(os.path.join(d, "t.tiktoken")).read().split()
            self.assertEqual(lines, ["YQ==", "0", "IA==", "1", "IGE=", "2"])  # a, space, " a"
            meta = json.load(open(os.path.join(d, "tiktoken.json")))
            self.assertEqual(meta["special_tokens"], {"<|endoftext|>": 3})
            self.assertEqual(lm_systems.template(path), ([], 3))


class Output(unittest.TestCase):
    ROWS = [{"system": "sluice-turbo", "dtype": "uint8", "setting": 2, "setting_name": "replicas", "ok": True,
             "images_per_s": 1234.5, "cpu_s_per_1k": 1.5, "trainer_cpu_s_per_1k": 0.05, "first_batch_s": 2.5,
             "peak_mem_mb": 300},
            {"system": "ray-data", "dtype": "uint8", "setting": 2, "setting_name": "actors", "ok": False,
             "error": "exit 1: ImportError: no pydantic"}]

    def test_table_shows_failures_with_their_error(self):
        t = check.format_table(self.ROWS)
        lines = t.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertIn("replicas=2", lines[2])
        self.assertIn("1,234.5", lines[2])
        self.assertTrue(lines[3].endswith("FAILED: exit 1: ImportError: no pydantic"))
        self.assertNotIn("1,234", lines[3])

    def test_json_is_snake_case(self):
        report = {"images": {"best": check.pick_best(self.ROWS)}, "load_avg_at_start": [1.0, 2.0, 3.0]}
        self.assertEqual(check.snake_case_keys(json.loads(check.to_json(report))), [])
        self.assertEqual(check.snake_case_keys({"imagesPerS": 1, "a": {"first-batch": 2}}), ["$.imagesPerS", "$.a.first-batch"])

    def test_pick_best_keeps_the_grid(self):
        rows = [dict(self.ROWS[0], setting=1, images_per_s=900.0), dict(self.ROWS[0]), dict(self.ROWS[0], setting=3, ok=False)]
        best = check.pick_best(rows)
        self.assertEqual(len(best), 1)
        self.assertEqual(best[0]["setting"], 2)
        self.assertEqual(best[0]["grid"], {"1": 900.0, "2": 1234.5, "3": "failed"})
        # A second pass: each setting keeps its best, a failure does not
        # hide a run that passed.
        rows += [dict(self.ROWS[0], setting=1, images_per_s=1300.0), dict(self.ROWS[0], setting=2, ok=False),
                 dict(self.ROWS[0], setting=3, images_per_s=1000.0)]
        best = check.pick_best(rows)
        self.assertEqual((best[0]["setting"], best[0]["images_per_s"]), (1, 1300.0))
        self.assertEqual(best[0]["grid"], {"1": 1300.0, "2": 1234.5, "3": 1000.0})

    def test_targets(self):
        best = [dict(self.ROWS[0]), {"system": "dali-cpu", "dtype": "uint8", "ok": True, "images_per_s": 900.0,
                                     "cpu_s_per_1k": 2.0, "trainer_cpu_s_per_1k": 2.0, "first_batch_s": 3.0}]
        lines = check.targets(best, [{"system": "sluice", "tokenizer": "gpt2", "ok": True, "tokens_per_cpu_s": 3e6},
                                     {"system": "tiktoken", "tokenizer": "gpt2", "ok": True, "tokens_per_cpu_s": 4e6}])
        self.assertIn("images per CPU-second sluice-turbo 667, best peer dali-cpu 500: 1.33x (target 1.5x: NOT met)", lines[0])
        self.assertIn("0.03x (target <= 0.5x: met)", lines[1])
        self.assertIn("(target no later: met)", lines[2])
        self.assertIn("f32: nothing to compare", lines[4])
        self.assertIn("lm gpt2: tokens per CPU-second sluice 3.00M, best peer tiktoken 4.00M: 0.75x (target 2x: NOT met)", lines[5])

    def test_figures(self):
        f = check.figures({"images": 1100, "first_batch_images": 100, "t_start": 0.0, "t_first": 2.0, "t_end": 4.0,
                           "tree_cpu_first": 10.0, "tree_cpu_end": 13.0, "trainer_cpu_s": 0.5, "peak_mem_mb": 99.6})
        self.assertEqual(f, {"images_per_s": 500.0, "cpu_s_per_1k": 3.0, "trainer_cpu_s_per_1k": 0.5,
                             "first_batch_s": 2.0, "peak_mem_mb": 100})


if __name__ == "__main__":
    unittest.main()
