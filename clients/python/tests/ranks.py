#!/usr/bin/python3
"""Ranks of a data-parallel trainer as threads of one process, each a
sluice.Loader on its node's agent, for the integration suite's resume
scenarios (test/integration/resume_test.go). No torch: a rank's "model"
is the list of samples it took, appended to a keys file as
"epoch step source key" lines, flushed after every batch.

    ranks.py --world-size W --rank R=URL [--rank R=URL ...] --out DIR --run NAME
    ranks.py --world-size W --agent URL --node-rank N --nproc-per-node P --out - --run NAME
             [--ckpt-after N] [--stop-after N] [--resume STATE.json | --resume-own RUN]
             [--stagger S] [--seed N] [--prefetch N] [--generation G]

--ckpt-after N: after its N-th batch each rank writes its state_dict() to
DIR/NAME-state-rankR.json (atomically), as a DDP trainer's ranks each hold
the same state at a checkpoint, and reads on until killed or done.
--stop-after N: after its N-th batch a rank stops taking batches (its
prefetched ones stay with it) and waits to be killed, as a crashed
trainer's would.
--resume: every rank loads that state (rank 0's checkpoint, DDP style);
--resume-own RUN: rank R loads DIR/RUN-state-rankR.json (rank 0's if the
checkpointed run had no rank R). The ranks start
at once (a barrier), each after a random delay of up to --stagger seconds.
--agent with --node-rank and --nproc-per-node: the ranks of node N as
torchrun numbers them (N*P..N*P+P-1), all on the one agent URL (a
trainer pod beside its agent, test/e2e). --out -: no files; each rank's
lines go to stdout as "R epoch step source key", then "R done: bytes=N"
(or "R error: ..." and exit 3); checkpoints are not written. A rank
that is done says in its .done file, or that line, the bytes of the
arrays it took (bytes=N).
--generation G is the launch's (sluice.Loader's generation), as torchrun
or sluice.torch give every rank of one launch.
A rank that is done writes DIR/NAME-rankR.done (bytes=N); one that fails writes its
error to DIR/NAME-rankR.err and the process exits 3.
"""

import argparse
import contextlib
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sluice import Loader  # noqa: E402
from sluice.loader import EPOCH, KEY, SOURCE, STEP  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--rank", action="append", default=[], help="R=URL: a rank of this process and its agent")
    ap.add_argument("--agent", help="URL: the agent of --node-rank's ranks")
    ap.add_argument("--node-rank", type=int)
    ap.add_argument("--nproc-per-node", type=int)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--ckpt-after", type=int, default=0)
    ap.add_argument("--stop-after", type=int, default=0)
    ap.add_argument("--resume")
    ap.add_argument("--resume-own")
    ap.add_argument("--stagger", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--generation")
    args = ap.parse_args()

    ranks = []
    for spec in args.rank:
        r, url = spec.split("=", 1)
        ranks.append((int(r), url))
    if args.agent:
        n, p = args.node_rank, args.nproc_per_node
        ranks += [(r, args.agent) for r in range(n * p, (n + 1) * p)]
    if not ranks:
        ap.error("give --rank, or --agent with --node-rank and --nproc-per-node")
    to_stdout = args.out == "-"
    if to_stdout and (args.ckpt_after or args.stop_after or args.resume_own):
        ap.error("--out -: no --ckpt-after, --stop-after or --resume-own (they need files)")
    stdout_lock = threading.Lock()
    rng = random.Random(args.seed)
    delays = {r: rng.uniform(0, args.stagger) for r, _ in ranks}
    start = threading.Barrier(len(ranks))
    failed = threading.Event()

    def path(name):
        return os.path.join(args.out, f"{args.run}-{name}")

    class StdoutLines:
        """A rank's keys file on stdout: each line prefixed with the rank."""

        def __init__(self, rank):
            self.prefix = f"{rank} "

        def write(self, text):
            with stdout_lock:
                sys.stdout.write("".join(self.prefix + line + "\n" for line in text.splitlines()))

        def flush(self):
            with stdout_lock:
                sys.stdout.flush()

    def keys_out(rank):
        if to_stdout:
            return contextlib.nullcontext(StdoutLines(rank))
        return open(path(f"rank{rank}.keys"), "a")

    def mark(rank, what, text=""):
        if to_stdout:
            with stdout_lock:
                print(f"{rank} {what}{': ' + text.strip() if text else ''}", flush=True)
            return
        with open(path(f"rank{rank}.{what}"), "w") as f:
            f.write(text)

    def rank_main(rank, url):
        try:
            loader = Loader(url, rank=rank, world_size=args.world_size, prefetch=args.prefetch, timeout=120,
                            generation=args.generation)
            if args.resume or args.resume_own:
                src = args.resume
                if args.resume_own:
                    # A rank the checkpointed run lacked (more ranks now) loads rank 0's.
                    own = os.path.join(args.out, f"{args.resume_own}-state-rank{rank}.json")
                    src = own if os.path.exists(own) else os.path.join(args.out, f"{args.resume_own}-state-rank0.json")
                with open(src) as f:
                    loader.load_state_dict(json.load(f))
            start.wait()
            time.sleep(delays[rank])
            n = nbytes = 0
            with keys_out(rank) as out:
                for epoch in loader.epochs():
                    for batch in epoch:
                        srcs = batch.get(SOURCE) or [-1] * len(batch[KEY])
                        out.write("".join(f"{batch[EPOCH]} {batch[STEP]} {s} {k}\n" for s, k in zip(srcs, batch[KEY])))
                        if not batch[KEY]:
                            out.write(f"{batch[EPOCH]} {batch[STEP]} -1 -\n")  # a step of zero rows, taken
                        out.flush()
                        n += 1
                        nbytes += sum(v.nbytes for v in batch.values() if hasattr(v, "nbytes"))
                        if n == args.ckpt_after:
                            save(path(f"state-rank{rank}.json"), loader.state_dict())
                        if n == args.stop_after:
                            open(path(f"rank{rank}.stopped"), "w").close()
                            while True:
                                time.sleep(1)  # killed, its prefetched batches lost
            mark(rank, "done", f"bytes={nbytes}")
            loader.close()
        except BaseException as e:  # noqa: BLE001 - the test reads why
            mark(rank, "err" if not to_stdout else "error", f"{type(e).__name__}: {e}\n")
            failed.set()

    threads = [threading.Thread(target=rank_main, args=rk, daemon=True) for rk in ranks]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.2)
            if failed.is_set():
                os._exit(3)  # the other ranks' requests die with the process, as a crashed trainer's
    sys.exit(3 if failed.is_set() else 0)


def save(dst, state):
    with open(dst + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(dst + ".tmp", dst)


if __name__ == "__main__":
    main()
