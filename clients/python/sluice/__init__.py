"""Sluice's Python client: a training loop's batches from a `sluice agent`.

    loader = sluice.Loader("http://127.0.0.1:8081", rank=0, world_size=1)
    for batches in loader.epochs():
        for batch in batches:
            batch["image"], batch["label"], batch["__key__"]

sluice.torch.SluiceIterableDataset wraps it for torch's DataLoader;
sluice.from_torchvision turns a torchvision Compose into a pipeline spec.
"""

from .errors import AgentError, CorruptBatch, JobEnded, SluiceError, UnsupportedTransform
from .loader import EPOCH, KEY, STEP, Loader
from .transforms import from_torchvision

__all__ = [
    "Loader", "AgentError", "JobEnded", "CorruptBatch", "SluiceError", "UnsupportedTransform",
    "from_torchvision", "KEY", "EPOCH", "STEP",
]
__version__ = "0.1.0"
