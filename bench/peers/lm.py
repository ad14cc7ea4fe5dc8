"""The language-model part of bench/peers: JSONL text (the BPE tests' real
corpus, functions/text/bpe/testdata/corpus.txt.gz: licenses, Candide, the
UDHR in 80 languages), tokenized with GPT-2's and Llama 3's tokenizer.json
(.ci/tokref/install.sh's) and packed into rows of 2,048 by HF datasets +
tokenizers, tiktoken and Sluice's lm-pretrain (lm_systems.py). The ids
must be identical (check.check_tokens)."""

import gzip
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check  # noqa: E402

SYSTEMS = ["hf-datasets", "tiktoken", "sluice"]
TOKENIZERS = ["gpt2", "llama3"]


def prepare_corpus(out, repeats=4, shards=8):
    """Documents of 5-40 consecutive lines of the corpus, the corpus taken
    `repeats` times, each time its lines shuffled differently (so that no
    document repeats), dealt into JSONL shards."""
    done = os.path.join(out, "done")
    if os.path.exists(done):
        return json.load(open(done))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "shards"))
    with gzip.open(os.path.join(ROOT, "functions", "text", "bpe", "testdata", "corpus.txt.gz"), "rt") as f:
        lines = [ln.rstrip("\n") for ln in f if ln.strip()]
    rng = random.Random(1)
    docs = []
    for _ in range(repeats):
        ls = lines[:]
        rng.shuffle(ls)
        i = 0
        while i < len(ls):
            n = rng.randint(5, 40)
            docs.append("\n".join(ls[i:i + n]))
            i += n
    files = [open(os.path.join(out, "shards", f"text-{s:04d}.jsonl"), "w") for s in range(shards)]
    for i, d in enumerate(docs):
        files[i % shards].write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    for f in files:
        f.close()
    info = {"documents": len(docs), "bytes": sum(len(d.encode()) for d in docs), "shards": shards}
    json.dump(info, open(done, "w"))
    return info


def tokref_dir():
    r = subprocess.run(["bash", os.path.join(ROOT, ".ci", "tokref", "install.sh")], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("tokref: " + (r.stderr.strip().splitlines() or ["install.sh failed"])[-1])
    return r.stdout.strip().splitlines()[-1]


def vocab_dirs(out):
    import lm_systems
    src = tokref_dir()
    dirs = {}
    for name in TOKENIZERS:
        d = os.path.join(out, "vocab-" + name)
        if not os.path.exists(os.path.join(d, "tiktoken.json")):
            os.makedirs(d, exist_ok=True)
            shutil.copy(os.path.join(src, name + ".json"), os.path.join(d, "tokenizer.json"))
            lm_systems.write_tiktoken(os.path.join(d, "tokenizer.json"), d, name)
        dirs[name] = d
    return dirs


def run_all(args, cache, venvs, run_measured, bins):
    out = {"runs": []}
    data = os.path.join(cache, f"data-lm-{args.lm_repeats}")
    try:
        out["dataset"] = prepare_corpus(data, repeats=args.lm_repeats)
        vocab = vocab_dirs(data)
    except Exception as e:  # a missing npm or corpus: said, not skipped
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    # Text takes no JPEG decoder: the pure-Go build.
    sluice_bin, stack_bin = bins["sluice-go"], bins["stack"]
    for tok in TOKENIZERS:
        for system in SYSTEMS:
            work = os.path.join(args.workdir, f"lm-{system}-{tok}")
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            cmd = [venvs["main"], os.path.join(HERE, "lm_systems.py"), system, "--data", data, "--vocab", vocab[tok],
                   "--threads", "2", "--work", work, "--sluice-bin", sluice_bin, "--stack-bin", stack_bin]
            env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="true",
                       RAYON_NUM_THREADS="2", PYTHONUNBUFFERED="1")
            print(f"peers: lm {system} {tok} ...", file=sys.stderr, flush=True)
            status, res, peak, cpu, tail, wall = run_measured(cmd, env, args.timeout, work)
            row = {"system": system, "tokenizer": tok, "ok": False, "peak_mem_mb": round(peak), "cpu_s": round(cpu, 2)}
            if status != 0 or not res:
                row["error"] = ("timed out" if status is None else f"exit {status}") + (": " + tail if tail else "")
            else:
                row.update(ok=True, rows=res["rows"], tokens=res["tokens"], digest=res["digest"],
                           wall_s=round(res["wall_s"], 2),
                           tokens_per_s=round(res["tokens"] / res["wall_s"]),
                           tokens_per_cpu_s=round(res["tokens"] / cpu) if cpu else None,
                           cpu_by_process=res.get("cpu_by_process"))
            print("peers:   " + (f"{row.get('tokens_per_s')} tokens/s" if row["ok"] else "FAILED " + row["error"]),
                  file=sys.stderr, flush=True)
            out["runs"].append(row)
    check.check_tokens(out["runs"])
    return out


LM_COLUMNS = [
    ("system", "system", None), ("tokenizer", "tokenizer", None), ("rows", "rows", None),
    ("tokens", "tokens", None), ("wall_s", "wall s", 2), ("tokens_per_s", "tokens/s", 0),
    ("tokens_per_cpu_s", "tokens/CPU-s", 0), ("peak_mem_mb", "peak MB", 0),
]


def format_report(lm):
    if lm.get("error"):
        return "LM: FAILED: " + lm["error"]
    d = lm.get("dataset", {})
    head = (f"LM: {d.get('documents')} documents, {d.get('bytes', 0) / 1e6:.1f} MB of text in {d.get('shards')} JSONL shards, "
            "rows of 2,048 (each shard's tail padded), 2 processes/threads each; ids compared per tokenizer")
    return head + "\n" + check.format_table(lm["runs"], LM_COLUMNS)
