"""PyTorch integration: SluiceIterableDataset for
torch.utils.data.DataLoader(dataset, batch_size=None).

    ds = SluiceIterableDataset("http://127.0.0.1:8081")   # rank from torch.distributed
    dl = DataLoader(ds, batch_size=None)                   # num_workers=0: see below
    for epoch_batches in ds.epochs(): ...                  # or: for batch in dl: (one epoch)

Batches are already assembled by the agent (batch_size=None turns off
DataLoader's own batching); tensors are made with torch.from_numpy over
the response buffer, so nothing is copied unless pin_memory=True (one
copy, into page-locked memory, done in the prefetch thread). Use
num_workers=0: the loader prefetches in its own thread, and its state
(state_dict) must live in the training process.
"""

import os
import warnings

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from .loader import EPOCH, KEY, SOURCE, STEP, Loader

_META = (KEY, EPOCH, STEP, SOURCE)


def to_tensors(batch, pin_memory=False):
    """The batch dict with every numpy array as a torch tensor that shares
    its memory (or a pinned copy); keys, epoch, step and a mixed job's
    sources stay as they are."""
    out = {}
    for k, v in batch.items():
        if k in _META:
            out[k] = v
            continue
        t = torch.from_numpy(v)
        out[k] = t.pin_memory() if pin_memory else t
    return out


class SluiceIterableDataset(IterableDataset):
    """A job's batches for this process's rank, as dicts of tensors.

    rank and world_size default to torch.distributed's when it is
    initialised, else 0 and 1. Other keyword arguments go to sluice.Loader
    (prefetch, timeout, drop_last, ...). Iterating yields the rest of the
    current epoch (each `for` over it, or over a DataLoader of it, is one
    epoch); state_dict/load_state_dict are the Loader's.
    """

    def __init__(self, url, rank=None, world_size=None, pin_memory=False, **loader_kwargs):
        super().__init__()
        if rank is None or world_size is None:
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
            else:
                rank = 0 if rank is None else rank
                world_size = 1 if world_size is None else world_size
        if pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True: page-locked memory needs CUDA, and torch sees no GPU")
        self.pin_memory = pin_memory
        self.loader = Loader(url, rank=rank, world_size=world_size,
                             convert=lambda b: to_tensors(b, pin_memory), **loader_kwargs)
        self._generation_agreed = False
        # Ranks of a process group agree on a generation at the first
        # iteration (_agree_generation): the loader need not warn.
        self.loader._generation_later = world_size > 1 and dist.is_available() and dist.is_initialized()

    @property
    def epoch(self):
        return self.loader.epoch

    @property
    def done(self):
        return self.loader.done

    def __iter__(self):
        if get_worker_info() is not None:
            raise RuntimeError("SluiceIterableDataset in a DataLoader worker: use num_workers=0 "
                               "(the loader prefetches in its own thread, and its state must stay in the training process)")
        if not self._generation_agreed:
            self._agree_generation()
        return iter(self.loader)

    def _agree_generation(self):
        """Every rank of this launch takes rank 0's generation (a
        collective, at the first iteration, which every rank makes): the
        agent then tells a new launch's resume from a late rank's."""
        self._generation_agreed = True
        if self.loader.generation is not None or self.loader.world_size == 1:
            return
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != self.loader.world_size:
            return
        box = [os.urandom(12).hex() if dist.get_rank() == 0 else None]
        try:
            dist.broadcast_object_list(box, src=0)
        except Exception as e:  # noqa: BLE001 - the resume still works without it
            warnings.warn(f"sluice: could not agree on a generation over torch.distributed ({e}); "
                          "pass generation= to tell the agent which launch this is", stacklevel=3)
            return
        self.loader.generation = box[0]

    def epochs(self):
        return self.loader.epochs()

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def close(self):
        self.loader.close()
