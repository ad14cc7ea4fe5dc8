#!/usr/bin/python3
"""What reaches a PyTorch training loop, per second: the Python client
against a Sluice agent, and torch's DataLoader over torchvision's
ImageFolder. test/integration/pytorch_bench_test.go (TestBenchPyTorch) runs
the whole comparison; each mode prints one JSON object.

    pytorch_bench.py throughput --url URL
        sluice.Loader reads every batch as fast as it can (nothing else in
        the loop): MB/s and samples/s received, and the client's CPU use.
    pytorch_bench.py sluice --url URL --step-ms MS
        a training loop over sluice.torch.SluiceIterableDataset with a
        simulated GPU step of MS per batch (a sleep: a GPU step costs the
        host no CPU).
    pytorch_bench.py dataloader --dir IMAGEFOLDER --step-ms MS --workers 2 --batch-size B
        the same loop over DataLoader(ImageFolder(dir, transform)) with
        RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
        Normalize(ImageNet's mean and std) — the transforms whose Sluice
        spec from_torchvision makes (`--print-spec`).

Rates count the samples that reached the loop after the warm-up (the
first --warmup-samples, or --warmup-s seconds from the first batch:
replicas starting, workers forking), to the end.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_transform():
    from torchvision import transforms as T
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


class Meter:
    """Samples and bytes that reached the loop, counted after the warm-up."""

    def __init__(self, warmup_s, warmup_samples=0):
        self.warmup_s = warmup_s
        self.warmup_samples = warmup_samples
        self.first = None
        self.batch_size = 0
        self.start = None
        self.samples = self.bytes = self.batches = 0
        self.total_samples = 0
        self.wait_s = 0.0
        self.cpu0 = None
        self.created = time.perf_counter()

    def add(self, n, nbytes, waited):
        now = time.perf_counter()
        self.total_samples += n
        self.batch_size = max(self.batch_size, n)
        if self.first is None:
            self.first = now
        if self.start is None:
            if now - self.first < self.warmup_s or self.total_samples <= self.warmup_samples:
                return
            self.start, self.cpu0 = now, time.process_time()
            return  # this batch's wait straddles the warm-up's end
        self.samples += n
        self.bytes += nbytes
        self.batches += 1
        self.wait_s += waited

    def report(self, **extra):
        end = time.perf_counter()
        wall = end - self.start if self.start else 0.0
        out = {
            "samples": self.samples, "batches": self.batches, "seconds": round(wall, 3),
            "samples_per_s": round(self.samples / wall, 1) if wall else 0.0,
            "mb_per_s": round(self.bytes / wall / 1e6, 1) if wall else 0.0,
            "client_cpu_cores": round((time.process_time() - self.cpu0) / wall, 3) if wall else 0.0,
            "stall_fraction": round(self.wait_s / wall, 3) if wall else 0.0,
            "total_samples": self.total_samples, "batch_size": self.batch_size,
            "first_batch_after_s": round(self.first - self.created, 3) if self.first else None,
        }
        out.update(extra)
        return out


def run_throughput(args):
    import sluice
    ld = sluice.Loader(args.url, prefetch=args.prefetch, timeout=300)
    m = Meter(args.warmup_s, args.warmup_samples)
    deadline = None
    for batches in ld.epochs():
        t = time.perf_counter()
        for b in batches:
            waited = time.perf_counter() - t
            m.add(len(b["__key__"]), sum(v.nbytes for k, v in b.items() if not k.startswith("__")), waited)
            if deadline is None and m.start is not None and args.seconds:
                deadline = m.start + args.seconds
            if deadline and time.perf_counter() > deadline:
                break
            t = time.perf_counter()
        if deadline and time.perf_counter() > deadline:
            break
    ld.close()
    shape = {k: list(v.shape[1:]) + [str(v.dtype)] for k, v in b.items() if not k.startswith("__")}
    return m.report(mode="throughput", tensors=shape)


def simulated_step(step_s):
    # The GPU works while the host waits: no CPU is spent.
    time.sleep(step_s)


def run_sluice(args):
    from torch.utils.data import DataLoader

    from sluice.torch import SluiceIterableDataset
    ds = SluiceIterableDataset(args.url, prefetch=args.prefetch, timeout=300)
    m = Meter(args.warmup_s, args.warmup_samples)
    loader = DataLoader(ds, batch_size=None)
    while not ds.done:
        t = time.perf_counter()
        for b in loader:
            waited = time.perf_counter() - t
            x = b["image"]
            m.add(len(x), x.numel() * x.element_size(), waited)
            simulated_step(args.step_ms / 1000)
            t = time.perf_counter()
    ds.close()
    return m.report(mode="sluice", step_ms=args.step_ms)


def run_dataloader(args):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    ds = ImageFolder(args.dir, transform=train_transform())
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0, drop_last=False)
    m = Meter(args.warmup_s, args.warmup_samples)
    for _ in range(args.epochs):
        t = time.perf_counter()
        for x, y in loader:
            waited = time.perf_counter() - t
            m.add(len(x), x.numel() * x.element_size(), waited)
            simulated_step(args.step_ms / 1000)
            t = time.perf_counter()
    return m.report(mode="dataloader", step_ms=args.step_ms, workers=args.workers,
                    images=len(ds), epochs=args.epochs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["throughput", "sluice", "dataloader"])
    ap.add_argument("--url", help="the agent (throughput, sluice)")
    ap.add_argument("--dir", help="an ImageFolder directory (dataloader)")
    ap.add_argument("--step-ms", type=float, default=10.0, help="simulated GPU time per batch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--warmup-s", type=float, default=0.0, help="count nothing for this long after the first batch")
    ap.add_argument("--warmup-samples", type=int, default=0, help="count nothing until this many samples arrived")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (throughput; 0: read to the end)")
    ap.add_argument("--print-spec", action="store_true", help="print the Sluice spec of the transforms and exit")
    args = ap.parse_args()
    if args.print_spec:
        import sluice
        print(sluice.from_torchvision(train_transform(), name="torchvision-train"), end="")
        return
    run = {"throughput": run_throughput, "sluice": run_sluice, "dataloader": run_dataloader}[args.mode]
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
