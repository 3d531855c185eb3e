"""The float32 reference: plain PyTorch attention over the same paged cache and page table.

It gathers each request's pages through the block table (so a candidate that misreads the table cannot
agree with it by accident), dequantises fp8 caches with their scales, and applies the causal offset of the
new tokens (none for a DCP context share, whose queries follow every key), GQA, sliding window and soft-cap
exactly as the spec says. Queries are processed in chunks so
that long prefills fit in memory.

Attention sinks (``problem.sinks``, gpt-oss): each head's sink logit is one more entry in every row's softmax
denominator and contributes no value, ``out = sum_j exp(s_j - lse) v_j`` with
``lse = log(exp(sink) + sum_j exp(s_j))``; the sink is not soft-capped or masked (it is not a position). The
returned LSE includes the sink. That is what FlashInfer's sink kernels return (its fa3 variant's
``OnlineSoftmaxWithSink.finalize`` folds the sink into the row sum it returns as the LSE) and what makes a DCP merge
exact: shares merged by LSE (``merge_by_lse``) equal the whole when exactly one share carries the sink
(``problem.split_halves``; vLLM's Triton kernel likewise loads the sink in KV segment 0 only).
"""

from __future__ import annotations

import math

import torch

from hwtune.probes.attention.problem import AttentionProblem

#: Score-matrix elements per chunk (float32): about 1 GiB.
_CHUNK_ELEMENTS = 1 << 28


def reference_attention(problem: AttentionProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): float32 [num_tokens, num_heads, head_size] and natural-log LSE [num_tokens, num_heads]; for an MLA
    problem, ``mla.reference_mla``'s (multi-head attention over the up-projected latent: out is [tokens, heads, v])."""
    if getattr(problem, "is_mla", False):
        from hwtune.probes.attention.mla import reference_mla

        return reference_mla(problem)  # type: ignore[arg-type]
    spec = problem.spec
    out = torch.empty(problem.num_tokens, spec.num_heads, spec.head_size, dtype=torch.float32, device=problem.q.device)
    lse = torch.empty(problem.num_tokens, spec.num_heads, dtype=torch.float32, device=problem.q.device)
    group = spec.num_heads // spec.num_kv_heads
    sinks = None if problem.sinks is None else problem.sinks.float().to(problem.q.device)  # [h]
    for r in range(problem.batch):
        k, v = problem.gather_kv(r)  # [n, hk, d] float32
        n = k.shape[0]
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [h, n, d]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        sl = problem.query_slice(r)
        q = problem.q[sl].float().transpose(0, 1)  # [h, m, d]
        m = q.shape[1]
        first_pos = n - m
        chunk = max(1, _CHUNK_ELEMENTS // max(1, spec.num_heads * n))
        for c0 in range(0, m, chunk):
            c1 = min(m, c0 + chunk)
            scores = torch.matmul(q[:, c0:c1], k.transpose(1, 2)) * problem.softmax_scale  # [h, c, n]
            if spec.logits_soft_cap is not None:
                cap = spec.logits_soft_cap
                scores = cap * torch.tanh(scores / cap)
            pos = torch.arange(first_pos + c0, first_pos + c1, device=q.device)[:, None]
            keys = torch.arange(n, device=q.device)[None, :]
            visible = keys <= pos if problem.causal else torch.ones_like(keys <= pos)
            if spec.sliding_window is not None:
                visible &= keys > pos - spec.sliding_window
            scores = scores.masked_fill(~visible, -math.inf)
            chunk_lse = torch.logsumexp(scores, dim=-1)  # [h, c]
            if sinks is not None:  # one more denominator entry per row, with no value
                chunk_lse = torch.logaddexp(chunk_lse, sinks[:, None])
            probs = torch.exp(scores - chunk_lse[..., None])
            out[sl][c0:c1] = torch.matmul(probs, v).transpose(0, 1)
            lse[sl][c0:c1] = chunk_lse.transpose(0, 1)
    return out, lse


def merge_by_lse(
    out_a: torch.Tensor,
    lse_a: torch.Tensor,
    out_b: torch.Tensor,
    lse_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions over disjoint KV sets (what DCP does across ranks)."""
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    wa = torch.exp(lse_a.float() - lse)[..., None]
    wb = torch.exp(lse_b.float() - lse)[..., None]
    return out_a.float() * wa + out_b.float() * wb, lse
