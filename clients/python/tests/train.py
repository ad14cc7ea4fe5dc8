#!/usr/bin/python3
"""A real (tiny) DDP training loop fed by Sluice, for the integration
suite's resume scenarios (test/integration/pytorch_test.go) and as an example.

Each rank trains a linear classifier on the agent's uint8 images with
torch.distributed (gloo, 127.0.0.1) and DistributedDataParallel, and
appends "epoch step key" for every sample of every step it completed to
--keys-file. Rank 0 checkpoints the model, the optimiser and the loader's
state every --ckpt-every steps (and at the end of each epoch) to --ckpt,
atomically. --resume loads that checkpoint (any world size). After
--stop-after steps the rank writes --keys-file + ".stopped" and waits to be
killed, as a crashed job would be.

    train.py --url http://127.0.0.1:8081 --rank R --world-size W --master-port P \
             --ckpt ckpt.pt --keys-file keys-R.txt [--resume] [--ckpt-every N] [--stop-after N]
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sluice.torch import SluiceIterableDataset  # noqa: E402

CLASSES = 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--keys-file", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--stop-after", type=int, default=0, help="steps after which to stop and wait to be killed (0: train to the end)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                            rank=args.rank, world_size=args.world_size)
    ds = SluiceIterableDataset(args.url, timeout=120)  # rank and world size from torch.distributed
    model = None
    opt = None
    state = None
    if args.resume:
        state = torch.load(args.ckpt)
        ds.load_state_dict(state["loader"])
    loader = DataLoader(ds, batch_size=None)  # the agent batches; num_workers=0

    steps = 0
    with open(args.keys_file, "a") as keys_out:
        while not ds.done:
            for batch in loader:
                x = batch["image"].float().flatten(1) / 255
                y = batch["label"] % CLASSES
                if model is None:  # the input size comes from the first batch
                    model = DDP(torch.nn.Linear(x.shape[1], CLASSES))
                    opt = torch.optim.SGD(model.parameters(), lr=0.01)
                    if state is not None:
                        model.module.load_state_dict(state["model"])
                        opt.load_state_dict(state["optimizer"])
                # A rank may get zero rows in an epoch's last step; it still
                # takes part in the step (DDP's all-reduce).
                loss = F.cross_entropy(model(x), y, reduction="sum") / max(len(y), 1)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                if steps == 1 and ds.loader.resume_info is not None:
                    print(f"resumed: {json.dumps(ds.loader.resume_info)}", flush=True)
                for k in batch["__key__"]:
                    keys_out.write(f"{batch['__epoch__']} {batch['__step__']} {k}\n")
                keys_out.flush()
                if args.rank == 0 and (steps % args.ckpt_every == 0 or ds.loader.step == 0):
                    save(args.ckpt, model, opt, ds)
                if args.stop_after and steps == args.stop_after:
                    with open(args.keys_file + ".stopped", "w") as f:
                        f.write(f"{steps}\n")
                    while True:  # killed by the test, mid-epoch, batches prefetched
                        time.sleep(1)
    if args.rank == 0:
        save(args.ckpt, model, opt, ds)
    dist.barrier()
    dist.destroy_process_group()
    ds.close()


def save(path, model, opt, ds):
    """Writes the checkpoint, and the loader's state as JSON beside it (for
    the test, which reads no pickle), each atomically."""
    state = ds.state_dict()
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "loader": state}, path + ".tmp")
    with open(path + ".loader.json.tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
    os.replace(path + ".loader.json.tmp", path + ".loader.json")


if __name__ == "__main__":
    main()
