"""Float32 references for hwtune's attention kernels (plain PyTorch, no Triton): the ground truth the
interpreter and GPU tests compare against."""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_table_row: torch.Tensor, length: int, kv_layout: str) -> torch.Tensor:
    """[length, kv_heads, D] float32 of one request's KV from a paged cache view (NHD or HND)."""
    page = cache.shape[1] if kv_layout == "NHD" else cache.shape[2]
    n_pages = -(-length // page)
    blocks = cache[block_table_row[:n_pages].long()].float()
    if kv_layout == "HND":
        blocks = blocks.transpose(1, 2)
    return blocks.reshape(n_pages * page, *blocks.shape[2:])[:length]


def paged_attention_ref(
    q,
    k_cache,
    v_cache,
    block_table,
    seq_lens,
    query_start_loc,
    *,
    softmax_scale,
    kv_layout="NHD",
    k_scale=1.0,
    v_scale=1.0,
):
    """(out float32 [T, H, D], lse float32 [T, H], natural log) with the kernels' causal convention:
    query token i of request r sits at position seq_len - q_len + i."""
    num_tokens, num_heads, _ = q.shape
    dev = q.device
    out = torch.full(q.shape, float("nan"), dtype=torch.float32, device=dev)
    lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=dev)
    qsl = query_start_loc.cpu().tolist()
    seq_lens = seq_lens.cpu().tolist()
    for r in range(block_table.shape[0]):
        s, e = qsl[r], qsl[r + 1]
        if e == s:
            continue
        length = seq_lens[r]
        k = gather_kv(k_cache, block_table[r], length, kv_layout).to(dev) * k_scale
        v = gather_kv(v_cache, block_table[r], length, kv_layout).to(dev) * v_scale
        group = num_heads // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        qr = q[s:e].float()
        scores = torch.einsum("thd,nhd->htn", qr, k) * softmax_scale
        pos = length - (e - s) + torch.arange(e - s, device=dev)
        mask = torch.arange(length, device=dev)[None, :] <= pos[:, None]
        scores = scores.masked_fill(~mask[None], float("-inf"))
        lse[s:e] = torch.logsumexp(scores, dim=-1).transpose(0, 1)
        out[s:e] = torch.einsum("htn,nhd->thd", torch.softmax(scores, dim=-1), v)
    return out, lse
