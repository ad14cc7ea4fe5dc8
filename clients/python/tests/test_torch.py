import os
import socket
import subprocess
import sys
import unittest

try:
    import torch
    from torch.utils.data import DataLoader

    from sluice.torch import SluiceIterableDataset
except ImportError:
    torch = None

from fakeagent import FakeAgent
from test_loader import batches


@unittest.skipIf(torch is None, "torch not installed")
class SluiceIterableDatasetTest(unittest.TestCase):
    def setUp(self):
        self.agent = FakeAgent([batches(3, 2), batches(2, 2, 100)], world_size=2)
        self.addCleanup(self.agent.close)

    def dataset(self, **kw):
        ds = SluiceIterableDataset(self.agent.url, timeout=10, connect_timeout=1, **kw)
        self.addCleanup(ds.close)
        return ds

    def test_dataloader_epochs_of_tensors(self):
        ds = self.dataset(rank=1, world_size=2)  # torch.distributed is not initialised here
        loader = DataLoader(ds, batch_size=None)
        epochs = []
        while not ds.done:
            epochs.append([b for b in loader])
        self.assertEqual([len(e) for e in epochs], [2, 1, 0])
        b = epochs[0][0]
        self.assertIsInstance(b["image"], torch.Tensor)
        self.assertEqual((b["image"].dtype, b["label"].dtype), (torch.uint8, torch.int64))
        self.assertEqual(b["__key__"], ["0002", "0003"])
        self.assertEqual(b["label"].tolist(), [2, 3])
        self.assertEqual((b["__epoch__"], b["__step__"]), (0, 0))
        # The last step of epoch 0 has one batch: rank 1 gets zero rows.
        self.assertEqual(tuple(epochs[0][1]["image"].shape), (0, 4, 4, 3))
        self.assertEqual(ds.state_dict()["epoch"], 2)

    def test_rank_defaults_without_distributed(self):
        ds = SluiceIterableDataset("http://127.0.0.1:1")
        self.assertEqual((ds.loader.rank, ds.loader.world_size), (0, 1))

    @unittest.skipIf(torch is not None and torch.cuda.is_available(), "a GPU is present")
    def test_pin_memory_needs_cuda(self):
        with self.assertRaisesRegex(ValueError, "needs CUDA"):
            SluiceIterableDataset(self.agent.url, pin_memory=True)

    def test_state_dict_delegates(self):
        ds = self.dataset(rank=0, world_size=2)
        next(iter(ds))
        st = ds.state_dict()
        self.assertEqual((st["epoch"], st["step"], st["world_size"]), (0, 1, 2))
        ds2 = self.dataset(rank=0, world_size=2)
        ds2.load_state_dict(st)
        self.assertEqual(ds2.loader.state_dict(), st)

    def test_tensors_kept_alone_keep_their_buffer(self):
        """The loader reuses a response buffer once nothing views it: a
        tensor kept without its batch dict (nor the numpy arrays under it)
        must keep the buffer from reuse, as torch.from_numpy's tensors
        hold their array."""
        agent = FakeAgent([batches(20, 3)])
        self.addCleanup(agent.close)
        ds = self.dataset_of(agent, prefetch=1)
        kept = []
        for i, b in enumerate(DataLoader(ds, batch_size=None)):
            if i % 2 == 0:
                kept.append((b["image"], b["label"], list(b["__key__"])))
            del b
        self.assertEqual(len(kept), 10)
        for image, label, keys in kept:
            self.assertEqual(label.tolist(), [int(k) for k in keys])
            self.assertEqual(image[:, 0, 0, 0].tolist(), [int(k) % 256 for k in keys])
        self.assertLessEqual(len(ds.loader._pool), ds.loader.prefetch + 4)

    def dataset_of(self, agent, **kw):
        ds = SluiceIterableDataset(agent.url, timeout=10, connect_timeout=1, **kw)
        self.addCleanup(ds.close)
        return ds

    def test_ranks_agree_on_a_generation(self):
        # Two ranks of a gloo process group on loopback: rank 0's
        # generation reaches rank 1 at the first iteration.
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        script = (
            "import sys; import torch.distributed as dist; from sluice.torch import SluiceIterableDataset\n"
            f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', rank=int(sys.argv[1]), world_size=2)\n"
            "ds = SluiceIterableDataset('http://127.0.0.1:1')\n"
            "ds._agree_generation(); print(ds.loader.generation); dist.destroy_process_group()\n")
        env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), ".."), "OMP_NUM_THREADS": "1"}
        env.pop("TORCHELASTIC_RUN_ID", None)
        procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], env=env, stdout=subprocess.PIPE, text=True)
                 for r in range(2)]
        out = [p.communicate(timeout=120)[0].strip() for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0])
        self.assertEqual(out[0], out[1])
        self.assertRegex(out[0], r"^[0-9a-f]{24}$")

    def test_workers_refused(self):
        ds = self.dataset(rank=0, world_size=2)
        with self.assertRaisesRegex(RuntimeError, "num_workers=0"):
            list(DataLoader(ds, batch_size=None, num_workers=1))


if __name__ == "__main__":
    unittest.main()


@unittest.skipIf(torch is None, "torch not installed")
class ToTensorsTest(unittest.TestCase):
    def test_a_mixed_jobs_sources_stay_a_list(self):
        import numpy as np

        from sluice.torch import to_tensors

        got = to_tensors({"label": np.array([1, 2]), "__key__": ["a", "b"], "__epoch__": 0, "__step__": 0, "__source__": [0, 1]})
        self.assertIsInstance(got["label"], torch.Tensor)
        self.assertEqual(got["__source__"], [0, 1])
