"""Helpers for packed causal LM rows (a pipeline ending with the `pack` op,
such as the built-in lm-pretrain), in torch. A batch of B rows of T tokens:

    input_ids       int32 [B, T]    documents, EOS after each, cut into rows
    position_ids    int32 [B, T]    0 at the start of every sequence in a row
    cu_seqlens      int32 [B, T+1]  where each sequence starts, then T repeated
    num_seqs        int32 [B]       sequences in the row (padding's included)
    attention_mask  int32 [B, T]    1 a token, 0 padding (the last row of a shard)

A sequence is a document, or the part of one that continues from the row
before (it starts at position 0 too). Padding, where there is any, is the
row's last sequence, so cu_seqlens always ends at T.

    mask = causal_document_mask(batch["position_ids"])            # SDPA's attn_mask
    labels = next_token_labels(batch["input_ids"], batch["position_ids"], batch["attention_mask"])
    cu, max_len = varlen_cu_seqlens(batch["cu_seqlens"], batch["num_seqs"])  # flash-attn varlen
"""

import torch

IGNORE_INDEX = -100


def document_ids(position_ids):
    """Which sequence of its row each token is in: [B, T], from 1."""
    return torch.cumsum((position_ids == 0).to(torch.int32), dim=-1)


def causal_document_mask(position_ids):
    """A bool [B, 1, T, T] attention mask (True: may attend) letting each
    token see the tokens before it in its own sequence only, for
    torch.nn.functional.scaled_dot_product_attention(attn_mask=...)."""
    doc = document_ids(position_ids)
    t = position_ids.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=position_ids.device).tril()
    same = doc.unsqueeze(-1) == doc.unsqueeze(-2)
    return (same & causal).unsqueeze(1)


def next_token_labels(input_ids, position_ids, attention_mask, ignore_index=IGNORE_INDEX):
    """Each token's target, the next token of its sequence ([B, T], int64):
    ignore_index where the next token starts another sequence (another
    document, or padding), and at the row's end."""
    labels = torch.full(input_ids.shape, ignore_index, dtype=torch.int64, device=input_ids.device)
    nxt = input_ids[:, 1:].to(torch.int64)
    keep = (position_ids[:, 1:] != 0) & (attention_mask[:, 1:] != 0)
    labels[:, :-1] = torch.where(keep, nxt, torch.full_like(nxt, ignore_index))
    return labels


def varlen_cu_seqlens(cu_seqlens, num_seqs):
    """The batch as one varlen batch of B*T tokens, for flash-attn's
    flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
    max_seqlen_q=max_len, max_seqlen_k=max_len, causal=True) over
    q = q.view(B*T, heads, dim): (cu int32 [S+1], max_len int)."""
    b, t1 = cu_seqlens.shape
    t = t1 - 1
    parts = [torch.zeros(1, dtype=torch.int32, device=cu_seqlens.device)]
    for i in range(b):
        n = int(num_seqs[i])
        parts.append(cu_seqlens[i, 1:n + 1].to(torch.int32) + i * t)
    cu = torch.cat(parts)
    return cu, int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
