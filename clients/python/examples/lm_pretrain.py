#!/usr/bin/python3
"""A tiny causal LM trained on packed rows from Sluice (the lm-pretrain
pipeline, or any spec ending with the `pack` op): see docs/language-models.md.

Each batch is B rows of T tokens; the model takes input_ids and
position_ids, and attends only within each row's sequences (documents, or
the part of one continuing from the row before), which position_ids mark
by restarting at 0. The loss is next-token prediction within a sequence,
padding left out.

    # a job with --pipeline lm-pretrain, its agent on 127.0.0.1:8081
    lm_pretrain.py --url http://127.0.0.1:8081 --vocab-size 128256 --epochs 1

It logs each step's loss (and, for a job mixing datasets, how many rows of
the batch came from each source), then a JSON line: steps, loss_first and
loss_last (means of the first and last 4 steps), rows, distinct_rows,
rows_by_source, torch (its version) and attention ("sdpa": torch >= 2.0's
scaled_dot_product_attention; "masked softmax" on torch 1.13).
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from sluice.lm import IGNORE_INDEX, causal_document_mask, next_token_labels  # noqa: E402
from sluice.torch import SluiceIterableDataset  # noqa: E402


# torch >= 2.0 has scaled_dot_product_attention (SDPA): a fused kernel that
# never holds the [B, heads, T, T] scores (on CPU, its flash kernel). torch
# 1.13 has not: there the scores are masked and softmaxed in full, several times
# slower at 2,048 tokens a row (docs/language-models.md).
SDPA = hasattr(F, "scaled_dot_product_attention")


def attend(q, k, v, mask, sdpa=SDPA):
    """Attention of q, k, v [B, heads, T, dim] where mask (bool, True: may
    attend, broadcast to [B, heads, T, T]) allows: SDPA when torch has it,
    else the same computed in full."""
    if sdpa:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = attend(q, k, v, mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """Token embeddings plus learned position embeddings indexed by
    position_ids (so a document's first token is at position 0 wherever it
    lies in the row), a few pre-norm transformer blocks, tied output."""

    def __init__(self, vocab_size, max_positions=2048, dim=64, layers=2, heads=4):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_positions, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        # Small embeddings (as GPT-2's): the tied output then starts near a
        # uniform guess, a loss of about ln(vocab_size), rather than tens.
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, input_ids, position_ids):
        mask = causal_document_mask(position_ids)
        x = self.tok(input_ids.long()) + self.pos(position_ids.long())
        for blk in self.blocks:
            x = blk(x, mask)
        return self.ln(x) @ self.tok.weight.T


def lm_loss(model, batch):
    logits = model(batch["input_ids"], batch["position_ids"])
    labels = next_token_labels(batch["input_ids"], batch["position_ids"], batch["attention_mask"])
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


def train(url, vocab_size, epochs=1, lr=3e-3, max_steps=0, seed=0, log=print, stats=None, **loader_kwargs):
    """Trains on the job's rows for epochs (or max_steps batches); returns
    the model and each step's loss. stats, a dict if given, gets what was
    read: rows, distinct (epoch, source, key) rows and, for a mixed job,
    rows by source (its index in the job spec's sources)."""
    torch.manual_seed(seed)
    ds = SluiceIterableDataset(url, **loader_kwargs)  # rank and world size from torch.distributed, if set up
    model, opt, losses = None, None, []
    stats = {} if stats is None else stats
    stats.update(rows=0, distinct_rows=0, rows_by_source={})
    seen = set()
    try:
        for epoch_batches in ds.epochs():
            for batch in epoch_batches:
                if model is None:  # the row length is the job's seq_len
                    model = TinyCausalLM(vocab_size, max_positions=batch["input_ids"].shape[1])
                    opt = torch.optim.AdamW(model.parameters(), lr=lr)
                loss = lm_loss(model, batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                keys, sources = batch["__key__"], batch.get("__source__")
                mix = ""
                if sources is not None:  # a mixed job: each row's source
                    counts = {}
                    for src in sources:
                        counts[src] = counts.get(src, 0) + 1
                        by = stats["rows_by_source"]
                        by[str(src)] = by.get(str(src), 0) + 1
                    mix = ", rows by source " + " ".join(f"{src}:{n}" for src, n in sorted(counts.items()))
                stats["rows"] += len(keys)
                seen.update((batch["__epoch__"], s, k) for s, k in zip(sources or [0] * len(keys), keys))
                stats["distinct_rows"] = len(seen)
                log(f"epoch {batch['__epoch__']} step {batch['__step__']}: loss {loss.item():.3f}{mix}")
                if max_steps and len(losses) >= max_steps:
                    return model, losses
            if ds.epoch >= epochs:
                break
    finally:
        ds.close()
    return model, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the trainer agent's address")
    ap.add_argument("--vocab-size", type=int, required=True, help="the tokenizer's (Llama 3: 128256; GPT-2: 50257)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    stats = {}
    _, losses = train(args.url, args.vocab_size, epochs=args.epochs, lr=args.lr, max_steps=args.max_steps, stats=stats)
    # The last line, for scripts: the loss at the start and the end (means
    # of up to 4 steps) and what was read.
    k = min(4, len(losses))
    print(json.dumps({"steps": len(losses), "loss_first": round(sum(losses[:k]) / max(k, 1), 3),
                      "loss_last": round(sum(losses[-k:]) / max(k, 1), 3), **stats,
                      "torch": torch.__version__, "attention": "sdpa" if SDPA else "masked softmax"}))


if __name__ == "__main__":
    main()
