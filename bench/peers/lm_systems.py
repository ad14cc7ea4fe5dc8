"""One language-model system's run, in its own process (bench/peers/lm.py
starts it, measured as the image runs are):

    lm_systems.py SYSTEM --data DIR --vocab VOCAB_DIR [--threads 2]

Every system makes the same rows, Sluice's lm-pretrain packing: each
shard's documents tokenized as Hugging Face tokenizers' encode(text,
add_special_tokens=True) gives (Llama 3's BOS included), EOS after each
document unless it ends in one, cut into rows of 2,048, the shard's last
row padded with EOS. It prints "PEERS {json}": rows, tokens (the
documents' tokens, EOS included, padding not), a digest of the rows
(order-free: the sorted per-row sha256s, hashed) and the wall seconds from
the process's start to the last row.
"""

import argparse
import base64
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

T0 = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEQ = 2048


def emit(obj):
    sys.stdout.write("PEERS " + json.dumps(obj) + "\n")
    sys.stdout.flush()


class Rows:
    def __init__(self):
        self.hashes = []
        self.rows = 0

    def add(self, row_bytes):
        self.hashes.append(hashlib.sha256(row_bytes).hexdigest())
        self.rows += 1

    def end(self):
        """After the last row, before any teardown: the run's time and the
        harness's CPU sample."""
        if not hasattr(self, "wall_s"):
            self.wall_s = time.time() - T0
            emit({"event": "end"})

    def digest(self):
        return hashlib.sha256("".join(sorted(self.hashes)).encode()).hexdigest()


def template(tokenizer_json):
    """(bos ids, eos id) as lm-pretrain takes them from tokenizer.json: the
    post-processor's TemplateProcessing specials before $A, and the EOS
    (<|endoftext|> or <|end_of_text|>)."""
    tj = json.load(open(tokenizer_json))
    ids = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    bos = []
    pp = tj.get("post_processor") or {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            for item in p["single"]:
                if "SpecialToken" in item:
                    bos += p["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                else:
                    break
    for name in ("<|endoftext|>", "<|end_of_text|>"):
        if name in ids:
            return bos, ids[name]
    raise SystemExit("no EOS token in " + tokenizer_json)


def pack(docs, bos, eos, rows, np):
    """docs: token id lists of one shard (BOS not yet added)."""
    flat = []
    for d in docs:
        d = bos + list(d)
        if not d or d[-1] != eos:
            d.append(eos)
        flat.extend(d)
    tokens = len(flat)
    if len(flat) % SEQ:
        flat.extend([eos] * (SEQ - len(flat) % SEQ))
    a = np.asarray(flat, dtype=np.int32).reshape(-1, SEQ)
    for r in a:
        rows.add(r.tobytes())
    return tokens


def shards(data):
    return sorted(glob.glob(os.path.join(data, "shards", "*.jsonl")))


def read_texts(path):
    with open(path) as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def run_tiktoken(a, rows):
    import numpy as np
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    tj = os.path.join(a.vocab, "tokenizer.json")
    bos, eos = template(tj)
    meta = json.load(open(os.path.join(a.vocab, "tiktoken.json")))
    enc = tiktoken.Encoding(name=meta["name"], pat_str=meta["pattern"],
                            mergeable_ranks=load_tiktoken_bpe(os.path.join(a.vocab, meta["name"] + ".tiktoken")),
                            special_tokens=meta["special_tokens"])
    tokens = 0
    for path in shards(a.data):
        tokens += pack(enc.encode_ordinary_batch(read_texts(path), num_threads=a.threads), bos, eos, rows, np)
    rows.end()
    return tokens


def run_hf(a, rows):
    import numpy as np
    import datasets
    from tokenizers import Tokenizer
    datasets.disable_progress_bars()
    tj = os.path.join(a.vocab, "tokenizer.json")
    bos, eos = template(tj)
    parts = []
    for i, path in enumerate(shards(a.data)):
        d = datasets.load_dataset("json", data_files=path, split="train", cache_dir=os.path.join(a.work, "hf"))
        parts.append(d.add_column("shard", [i] * len(d)))
    ds = datasets.concatenate_datasets(parts)
    tok = None

    def tokenize(batch):
        nonlocal tok
        if tok is None:
            tok = Tokenizer.from_file(tj)
        # encode_batch with the post-processor: the ids lm-pretrain's bpe op
        # gives (BOS where the template has one).
        return {"input_ids": [e.ids for e in tok.encode_batch(batch["text"], add_special_tokens=True)]}

    ds = ds.map(tokenize, batched=True, num_proc=a.threads, remove_columns=["text"], load_from_cache_file=False)

    def group_texts(batch):
        # transformers' run_clm group_texts, per shard and with the tail
        # padded (as lm-pretrain does) instead of dropped.
        out, by = [], {}
        for s, ids in zip(batch["shard"], batch["input_ids"]):
            by.setdefault(s, []).append(ids)
        ntok = []
        for s in sorted(by):
            flat = []
            for d in by[s]:
                d = list(d)
                if not d or d[-1] != eos:
                    d.append(eos)
                flat.extend(d)
            ntok.append(len(flat))
            if len(flat) % SEQ:
                flat.extend([eos] * (SEQ - len(flat) % SEQ))
            out += [flat[i:i + SEQ] for i in range(0, len(flat), SEQ)]
        return {"input_ids": out, "ntok": ntok + [0] * (len(out) - len(ntok))}

    # One batch for the whole set, one process: a shard must not be split
    # between map's batches or processes (run_clm's default batch of 1,000
    # documents would cut rows at batch ends, not at shard ends).
    ds = ds.map(group_texts, batched=True, batch_size=None, remove_columns=["shard", "input_ids"],
                load_from_cache_file=False)
    ds = ds.with_format("numpy")
    tokens = 0
    for b in ds.iter(batch_size=8):
        for r in b["input_ids"]:
            rows.add(np.asarray(r, dtype=np.int32).tobytes())
        tokens += int(b["ntok"].sum())
    rows.end()
    return tokens


def run_sluice(a, rows):
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    import numpy as np
    import sluice
    sys.path.insert(0, HERE)
    from systems import free_port
    work = a.work
    env = dict(os.environ, AWS_ACCESS_KEY_ID="peers", AWS_SECRET_ACCESS_KEY="peers-secret", AWS_REGION="us-east-1",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true")
    procs, logs = [], []

    def start(name, args):
        log = open(os.path.join(work, name + ".log"), "w")
        logs.append(log)
        p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        procs.append(p)
        return p

    try:
        stack = start("stack", [a.stack_bin, "--shards", os.path.join(a.data, "shards"), "--data-dir", os.path.join(work, "js")])
        info = json.loads(stack.stdout.readline())
        env.update(SLUICE_NATS_URL=info["nats_url"], SLUICE_S3_ENDPOINT=info["s3_endpoint"],
                   SLUICE_TEAM_KEY_DIR=os.path.join(work, "keys"))
        spec = os.path.join(work, "job.json")
        json.dump({"id": "peers-lm", "dataset": info["dataset"], "pipeline": "lm-pretrain", "batch_size": 8,
                   "epochs": 1, "seed": 1, "min_replicas": a.threads, "max_replicas": a.threads}, open(spec, "w"))
        r = subprocess.run([a.sluice_bin, "job", "submit", spec, "--vocab-dir", a.vocab], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode:
            raise RuntimeError("sluice job submit: " + r.stderr.strip().replace("\n", " | "))
        start("controller", [a.sluice_bin, "controller", "--actuator", "local", "--listen", "127.0.0.1:0",
                             "--max-replicas", str(a.threads), "--vocab-dir", a.vocab])
        # The trainer reads the agent's Unix socket, as one on its node does
        # (docs/pytorch.md) and as the image runs do: each batch a memfd.
        addr = f"127.0.0.1:{free_port()}"
        sock = os.path.join(work, "agent.sock")
        start("agent", [a.sluice_bin, "agent", "--job", "peers-lm", "--listen", addr, "--listen-unix", sock,
                        "--world-size", "1"])
        tokens = 0
        with sluice.Loader("unix:" + sock, prefetch=2, timeout=300, connect_timeout=60) as ld:
            for batches in ld.epochs():
                for b in batches:
                    ids, mask = b["input_ids"], b["attention_mask"]
                    for r in ids:
                        rows.add(np.ascontiguousarray(r, dtype=np.int32).tobytes())
                    tokens += int(mask.sum())
        rows.end()
        return tokens
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


SYSTEMS = {"hf-datasets": run_hf, "tiktoken": run_tiktoken, "sluice": run_sluice}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=sorted(SYSTEMS))
    ap.add_argument("--data", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--sluice-bin", default="")
    ap.add_argument("--stack-bin", default="")
    a = ap.parse_args()
    rows = Rows()
    cpu0 = time.process_time()
    tokens = SYSTEMS[a.system](a, rows)
    rows.end()
    emit({"event": "result", "rows": rows.rows, "tokens": tokens, "digest": rows.digest(),
          "wall_s": rows.wall_s, "trainer_cpu_s": time.process_time() - cpu0})


def write_tiktoken(tokenizer_json, out_dir, name):
    """The rank file tiktoken.load reads (base64 token, rank), made from a
    byte-level tokenizer.json whose ids are its merge ranks (GPT-2's and
    Llama 3's are), and the pattern and specials beside it."""
    tj = json.load(open(tokenizer_json))
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    specials = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    with open(os.path.join(out_dir, name + ".tiktoken"), "w") as f:
        for tok, i in sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1]):
            if tok in specials:
                continue
            f.write(base64.b64encode(bytes(dec[c] for c in tok)).decode() + " " + str(i) + "\n")
    pattern = None
    pre = tj.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split" and "Regex" in p.get("pattern", {}):
            pattern = p["pattern"]["Regex"]
            break
    if pattern is None:
        # ByteLevel's own (GPT-2's) split.
        pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    json.dump({"name": name, "pattern": pattern, "special_tokens": specials}, open(os.path.join(out_dir, "tiktoken.json"), "w"))


if __name__ == "__main__":
    main()
