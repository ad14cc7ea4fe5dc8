import json
import os
import socket
import time
import unittest
import warnings
from unittest import mock

import numpy as np

import sluice
from fakeagent import FakeAgent, make_batch


def keys(a, b):
    return [f"{i:04d}" for i in range(a, b)]


def batches(n, size, start=0):
    return [keys(start + i * size, start + (i + 1) * size) for i in range(n)]


class LoaderTest(unittest.TestCase):
    def agent(self, *a, **kw):
        ag = FakeAgent(*a, **kw)
        self.addCleanup(ag.close)
        return ag

    def loader(self, url, **kw):
        ld = sluice.Loader(url, timeout=10, connect_timeout=1, **kw)
        self.addCleanup(ld.close)
        return ld

    def test_epochs_are_explicit(self):
        ag = self.agent([batches(3, 2), batches(2, 2, 100)])
        ld = self.loader(ag.url)
        seen = []
        for n, batches_ in enumerate(ld.epochs()):
            self.assertEqual(ld.epoch, n)
            for b in batches_:
                self.assertEqual(b["__epoch__"], n)
                self.assertEqual(b["image"].shape, (2, 4, 4, 3))
                self.assertEqual(b["image"].dtype, np.uint8)
                self.assertEqual(b["label"].dtype, np.int64)
                np.testing.assert_array_equal(b["label"], [int(k) for k in b["__key__"]])
                seen.append((b["__epoch__"], b["__step__"], tuple(b["__key__"])))
        self.assertTrue(ld.done)
        self.assertEqual([s[:2] for s in seen], [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)])
        self.assertEqual(list(ld), [])  # nothing more

    def test_an_epoch_that_lacks_samples_says_so(self):
        ag = self.agent([batches(3, 2), batches(2, 2, 100)])
        ag.epoch_failed = {0: 7}
        ld = self.loader(ag.url)
        with self.assertWarnsRegex(UserWarning, "epoch 0 of job j lacks 7 samples"):
            for epoch in ld.epochs():
                for _ in epoch:
                    pass
        self.assertEqual(ld.failed_samples, {0: 7})

    def test_a_malformed_epoch_failed_is_a_corrupt_batch(self):
        ag = self.agent([batches(1, 2)])
        ag.epoch_failed = {0: "-1"}
        ld = self.loader(ag.url)
        with self.assertRaisesRegex(sluice.CorruptBatch, "epoch_failed"):
            list(ld)

    def test_buffers_are_reused_only_when_free(self):
        ag = self.agent([batches(20, 3)])
        ld = self.loader(ag.url, prefetch=1)
        kept = []
        for i, b in enumerate(ld):
            if i % 2 == 0:
                kept.append(b)  # held: its buffer must not be reused
        for b in kept:
            np.testing.assert_array_equal(b["label"], [int(k) for k in b["__key__"]])
            self.assertTrue((b["image"][:, 0, 0, 0] == b["label"] % 256).all())
        self.assertLessEqual(len(ld._pool), ld.prefetch + 4)

    def test_each_for_loop_is_one_epoch(self):
        ag = self.agent([batches(3, 1), batches(2, 1, 10)])
        ld = self.loader(ag.url)
        self.assertEqual(len(list(ld)), 3)
        self.assertEqual((ld.epoch, ld.step), (1, 0))
        self.assertEqual(len(list(ld)), 2)
        self.assertFalse(ld.done)  # not known until asked
        self.assertEqual(list(ld), [])
        self.assertTrue(ld.done)

    def test_legacy_agent_epochs_split_on_epoch_change(self):
        ag = self.agent([batches(3, 2), batches(2, 2, 100)], legacy=True)
        ld = self.loader(ag.url)
        first = list(ld)
        self.assertEqual([b["__step__"] for b in first], [0, 1, 2])
        second = list(ld)
        self.assertEqual([(b["__epoch__"], b["__step__"]) for b in second], [(1, 0), (1, 1)])

    def test_ranks_and_empty_tail(self):
        # 5 batches of one sample for 2 ranks: steps of 2, a last step of 1,
        # where rank 1 gets zero rows.
        ag = self.agent([batches(5, 1)], world_size=2)
        got = {}
        for r in range(2):
            ld = self.loader(ag.url, rank=r, world_size=2)
            got[r] = [list(b["__key__"]) for b in ld]
            self.assertEqual(ld.state_dict()["world_size"], 2)
        self.assertEqual(got[0], [["0000"], ["0002"], ["0004"]])
        self.assertEqual(got[1], [["0001"], ["0003"], []])
        for method, path, q, _ in ag.requests:
            self.assertEqual(q["world_size"], "2")

    def test_state_dict_tracks_what_the_loop_took(self):
        ag = self.agent([batches(4, 2), batches(4, 2, 100)])
        ld = self.loader(ag.url, prefetch=3)
        self.assertEqual(ld.state_dict(), {"v": 1, "job": None, "reader": "trainer", "epoch": 0, "step": 0,
                                           "world_size": 1, "position": None})
        it = iter(ld)
        next(it)
        next(it)
        time.sleep(0.2)  # let the prefetch run ahead: the state must not follow it
        st = ld.state_dict()
        self.assertEqual((st["job"], st["epoch"], st["step"], st["position"]), ("j", 0, 2, {"e": 0, "s": 1}))
        json.dumps(st)
        for _ in it:
            pass
        st = ld.state_dict()
        self.assertEqual((st["epoch"], st["step"], st["position"]), (1, 0, {"e": 0, "s": 3}))

    def test_load_state_dict_posts_resume_first(self):
        ag = self.agent([batches(4, 1), batches(4, 1, 100)], world_size=2)
        state = {"v": 1, "job": "j", "reader": "trainer", "epoch": 0, "step": 1, "world_size": 2,
                 "position": {"anything": [1, 2]}}
        ld = self.loader(ag.url, rank=1, world_size=3)
        ld.load_state_dict(json.loads(json.dumps(state)))
        self.assertEqual((ld.epoch, ld.step), (0, 1))
        self.assertEqual(ld.state_dict()["position"], {"anything": [1, 2]})
        b = next(iter(ld))
        method, path, q, body = ag.requests[0]
        self.assertEqual((method, path, q["world_size"], q["rank"]), ("POST", "/v1/resume", "3", "1"))
        self.assertNotIn("generation", q)  # none given, and not under torchrun
        self.assertEqual(json.loads(body), state)
        self.assertEqual(ag.requests[1][1], "/v1/batch")
        self.assertEqual(ld.resume_info, {"resumed": True, "replayed_shards": 0})
        self.assertEqual(b["__step__"], 1)
        with self.assertRaises(RuntimeError):
            ld.load_state_dict(state)

    def test_resume_names_the_generation(self):
        ag = self.agent([batches(4, 1)], world_size=2)
        state = {"v": 1, "job": "j", "reader": "trainer", "epoch": 0, "step": 0, "world_size": 2, "position": None}
        with mock.patch.dict(os.environ, {"TORCHELASTIC_RUN_ID": "job-7", "TORCHELASTIC_RESTART_COUNT": "2"}):
            ld = self.loader(ag.url, rank=0, world_size=2)
        self.assertEqual(ld.generation, "job-7.2")  # torchrun's launch
        ld.load_state_dict(state)
        next(iter(ld))
        self.assertEqual(ag.requests[0][2]["generation"], "job-7.2")
        self.assertEqual(self.loader("http://127.0.0.1:1", generation="g-1").generation, "g-1")
        for bad in ["", "a b", "x" * 129, "é"]:
            with self.assertRaises(ValueError):
                self.loader("http://127.0.0.1:1", generation=bad)

    def test_resume_of_several_ranks_without_a_generation_warns(self):
        state = {"v": 1, "job": "j", "reader": "trainer", "epoch": 0, "step": 0, "world_size": 2, "position": None}
        with self.assertWarnsRegex(UserWarning, "generation"):
            self.loader("http://127.0.0.1:1", rank=1, world_size=2).load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.loader("http://127.0.0.1:1", rank=1, world_size=2, generation="g").load_state_dict(state)
            self.loader("http://127.0.0.1:1").load_state_dict({**state, "world_size": 1})

    def test_load_state_dict_checks_the_state(self):
        ld = self.loader("http://127.0.0.1:1")
        with self.assertRaises(ValueError):
            ld.load_state_dict({"v": 2})
        with self.assertRaisesRegex(ValueError, "missing position"):
            ld.load_state_dict({"v": 1, "job": "j", "reader": "r", "epoch": 0, "step": 0, "world_size": 1})

    def test_wait_and_compute_are_reported_cumulatively(self):
        ag = self.agent([batches(4, 1)])
        ld = self.loader(ag.url, prefetch=1)
        for b in ld:
            time.sleep(0.05)  # "compute"
        gets = [q for m, p, q, _ in ag.requests if p == "/v1/batch"]
        steps = [int(q["steps"]) for q in gets]
        compute = [float(q["compute_s"]) for q in gets]
        self.assertEqual(steps, sorted(steps))
        self.assertEqual(compute, sorted(compute))
        self.assertGreaterEqual(compute[-1], 0.05)  # the last request saw at least one step's compute
        self.assertGreater(ld._compute_s, 0.19)
        self.assertTrue(all("wait_s" in q for q in gets))

    def test_conflict_is_an_agent_error_with_its_message(self):
        ag = self.agent([batches(2, 1)], world_size=2)
        ld = self.loader(ag.url, world_size=1)
        with self.assertRaises(sluice.AgentError) as cm:
            next(iter(ld))
        self.assertEqual(cm.exception.status, 409)
        self.assertIn("world_size 1, but the job's is 2", str(cm.exception))
        with self.assertRaises(sluice.AgentError):  # it stays failed
            next(iter(ld))

    def test_job_ended(self):
        ag = self.agent([batches(2, 1)])

        def ended(h):
            ag._send(h, 410, b"job j was cancelled: by user", headers={"Sluice-End": "ended"})
            return True
        ag.fail = ended
        ld = self.loader(ag.url)
        with self.assertRaisesRegex(sluice.JobEnded, "cancelled: by user"):
            list(ld)

    def test_stopped_agent(self):
        ag = self.agent([batches(2, 1)])
        ag.fail = lambda h: ag._send(h, 503, b"agent stopped") or True
        with self.assertRaisesRegex(sluice.AgentError, "503.*agent stopped"):
            list(self.loader(ag.url))

    def test_unreachable(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        ld = self.loader(f"http://127.0.0.1:{port}")
        t = time.monotonic()
        with self.assertRaisesRegex(sluice.AgentError, "unreachable"):
            list(ld)
        self.assertGreaterEqual(time.monotonic() - t, 0.9)  # retried for connect_timeout

    def test_connection_cut_mid_batch(self):
        ag = self.agent([batches(2, 1)])

        def cut(h):
            data = make_batch(0, 0, ["0000"])
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[:len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return True
        ag.fail = cut
        with self.assertRaisesRegex(sluice.AgentError, "reading a batch|connection closed after"):
            list(self.loader(ag.url))

    def test_mixed_job_names_each_rows_source(self):
        ag = self.agent([batches(1, 3)])
        body = sluice.safetensors.encode({"x": np.zeros((3,), np.uint8)},
                                         {"job": "j", "epoch": "0", "keys": '["a", "b", "c"]', "sources": "[0, 0, 1]"})
        ag.fail = lambda h: ag._send(h, 200, body) or True
        got = next(iter(self.loader(ag.url)))
        self.assertEqual(got["__source__"], [0, 0, 1])

    def test_corrupt_batch_names_the_problem(self):
        ag = self.agent([batches(2, 1)])
        cases = [
            (b"12345", "shorter than the 8-byte header length"),
            (sluice.safetensors.encode({"x": np.zeros((2, 1), np.uint8)}, {"job": "j", "epoch": "0", "keys": '["a"]'}),
             "tensor 'x' has shape [2, 1], want 1 rows"),
            (sluice.safetensors.encode({"x": np.zeros((1,), np.uint8)}, {"job": "j", "keys": '["a"]'}),
             "metadata has no 'epoch'"),
            (sluice.safetensors.encode({"x": np.zeros((1,), np.uint8)}, {"job": "j", "epoch": "0", "keys": '["a"]', "rank": "1"}),
             "for rank 1, but this loader is rank 0"),
            (sluice.safetensors.encode({"x": np.zeros((1,), np.uint8)}, {"job": "j", "epoch": "0", "keys": "[" * 100_000 + "]" * 100_000}),
             "metadata epoch or keys unreadable: nested deeper than the recursion limit"),
            (sluice.safetensors.encode({"x": np.zeros((1,), np.uint8)}, {"job": "j", "epoch": "0", "keys": '["a"]', "position": "[" * 100_000}),
             "metadata position is not JSON: nested deeper than the recursion limit"),
            (sluice.safetensors.encode({"x": np.zeros((1,), np.uint8)}, {"job": "j", "epoch": "0", "keys": '["a"]', "sources": "[0, 1]"}),
             "metadata sources is not a JSON array of one source index per key"),
        ]
        for body, want in cases:
            with self.subTest(want):
                ag.fail = lambda h, body=body: ag._send(h, 200, body) or True
                with self.assertRaises(sluice.CorruptBatch) as cm:
                    list(self.loader(ag.url))
                self.assertIn(want, str(cm.exception))

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            sluice.Loader("ftp://x")
        with self.assertRaises(ValueError):
            sluice.Loader("http://x:1", rank=2, world_size=2)


if __name__ == "__main__":
    unittest.main()
