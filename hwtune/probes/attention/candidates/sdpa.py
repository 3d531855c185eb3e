"""TORCH_SDPA: gather the pages into padded per-request K/V, then scaled_dot_product_attention.

The gather is part of the timed call (it is what an engine using SDPA over a paged cache must do each
step), so SDPA pays for reading the KV twice; docs/probes.md says so next to its figures. Tactics pick the
SDPA kernel (flash, efficient, cudnn, math). Kernels that take no attention mask (flash) run only batches
that need none: uniform lengths, and either single-token decode or prefill without a cached prefix.

Attention sinks (gpt-oss; SDPA has no sink argument and returns no LSE to correct by): one extra key column whose
logit is the sink and whose value is zero. K and V get one more key (value zero) and 8 more dimensions (zero on
every real key); the query gets the sink / scale in two of them (split into a model-dtype high and low part, so a
bf16 query carries the sink to about 2^-16 of it), and the extra key is 1 there; so ``q . k_sink * scale = sink``
and every other score is unchanged. The extra column and copies are in the timed call (an engine using SDPA for
a model with sinks would pay them too). Every query sees the sink column, so a batch with sinks always takes a
mask (flash, which takes none, is then unsupported).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported
from hwtune.probes.attention.problem import AttentionProblem, _cumsum

#: Extra head dimensions that carry the sink (a multiple of 8, as SDPA's fused kernels want head sizes).
SINK_DIMS = 8

_KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def gather_padded(problem: AttentionProblem, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K, V as [batch, kv_heads, length, dim] gathered through the block table (pages beyond are padding)."""
    k_pages = problem.k_cache()[problem.block_table.long()]  # [B, P, page, H, D] or [B, P, H, page, D]
    v_pages = problem.v_cache()[problem.block_table.long()]
    b, p = k_pages.shape[:2]
    if problem.layout == "NHD":
        k = k_pages.reshape(b, p * problem.page_size, *k_pages.shape[3:])[:, :length].transpose(1, 2)
        v = v_pages.reshape(b, p * problem.page_size, *v_pages.shape[3:])[:, :length].transpose(1, 2)
    else:
        h, d = k_pages.shape[2], k_pages.shape[4]
        k = k_pages.permute(0, 2, 1, 3, 4).reshape(b, h, p * problem.page_size, d)[:, :, :length]
        v = v_pages.permute(0, 2, 1, 3, 4).reshape(b, h, p * problem.page_size, d)[:, :, :length]
    return k, v


class SdpaRunner(Runner):
    """Wraps ``F.scaled_dot_product_attention`` under ``sdpa_kernel`` for the tactic's kernel, after gathering pages
    into padded K/V inside the timed call; builds a mask only when the batch needs one (flash refuses it)."""

    def __init__(self, tactic: str) -> None:
        super().__init__()
        self.tactic = tactic
        self.kernel = _KERNELS[tactic]
        self.problem: AttentionProblem | None = None

    def prepare(self, problem: AttentionProblem) -> None:
        self._alloc(problem, lse=False)
        self.problem = problem
        dev = problem.q.device
        lens = problem.seq_lens_list
        qlens = problem.query_lens
        uniform = len(set(lens)) == 1 and len(set(qlens)) == 1
        self.length = max(lens) if not uniform else lens[0]
        self.mq = max(qlens)
        b = problem.batch
        self.is_causal = False
        self.mask: torch.Tensor | None = None
        self.sinks = problem.sinks
        if uniform and self.mq == 1 and self.sinks is None:
            pass  # every query sees its whole context: no mask
        elif uniform and qlens[0] == lens[0] and self.sinks is None:
            self.is_causal = True  # prefill from empty: SDPA's top-left causal mask is the right one
        else:
            if self.tactic == "flash":
                raise Unsupported(
                    "SDPA's flash kernel takes no attention mask; this batch needs one "
                    "(mixed lengths, new tokens on a cached prefix, or the attention sinks' extra key column)"
                )
            seq = torch.tensor(lens, device=dev)[:, None, None]
            ql = torch.tensor(qlens, device=dev)[:, None, None]
            qi = torch.arange(self.mq, device=dev)[None, :, None]
            kj = torch.arange(self.length, device=dev)[None, None, :]
            valid_q = qi < ql
            self.mask = ((kj <= seq - ql + qi) & (kj < seq) & valid_q)[:, None]  # [B, 1, Mq, S]
            # rows of padding queries see nothing; give them one key so no kernel divides by zero
            self.mask[:, :, :, 0] |= ~valid_q[:, None, :, 0]
            if self.sinks is not None:  # the sink column, last, is seen by every query
                ones = torch.ones(b, 1, self.mq, 1, dtype=torch.bool, device=dev)
                self.mask = torch.cat([self.mask, ones], dim=-1)
        if self.sinks is not None:
            # the query's extra dimensions: sink / scale as a high and a low part in the model dtype
            c = (self.sinks.float() / problem.softmax_scale).to(dev)  # [H]
            hi = c.to(problem.q.dtype)
            lo = (c - hi.float()).to(problem.q.dtype)
            self.q_extra = torch.zeros(problem.spec.num_heads, SINK_DIMS, dtype=problem.q.dtype, device=dev)
            self.q_extra[:, 0], self.q_extra[:, 1] = hi, lo
        starts = torch.tensor([0] + _cumsum(qlens)[:-1], device=dev)
        offs = torch.arange(self.mq, device=dev)[None, :]
        self.q_valid = offs < torch.tensor(qlens, device=dev)[:, None]  # [B, Mq]
        self.q_src = torch.where(self.q_valid, starts[:, None] + offs, torch.zeros_like(offs))
        # the (request, query) of each real query, as indices: a boolean mask would make the host wait for the GPU
        self.out_b, self.out_q = self.q_valid.nonzero().unbind(1)
        self.dense_q = self.mq == 1 and min(qlens) == 1  # every request has its one query: q as it is
        self.expand = problem.spec.gqa_group > 1 and self.tactic in ("efficient", "cudnn")
        self.b = b

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        k, v = gather_padded(p, self.length)
        q = p.q if self.dense_q else p.q[self.q_src.reshape(-1)]
        q = q.reshape(self.b, self.mq, *p.q.shape[1:]).transpose(1, 2)  # [B, H, Mq, D]
        if self.sinks is not None:
            q, k, v = self._with_sink_column(q, k, v)
        if self.expand:
            g = p.spec.gqa_group
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        try:
            with sdpa_kernel([self.kernel]):
                o = F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    attn_mask=self.mask,
                    is_causal=self.is_causal,
                    scale=p.softmax_scale,
                    enable_gqa=not self.expand and p.spec.gqa_group > 1,
                )
        except RuntimeError as exc:
            if "No available kernel" in str(exc):
                raise Unsupported(f"SDPA {self.tactic} kernel refused this shape: {str(exc).splitlines()[0]}") from None
            raise
        if self.sinks is not None:
            o = o[..., : p.spec.head_size]
        self.out.copy_(o.transpose(1, 2)[self.out_b, self.out_q])  # [tokens, H, D], one gather

    def _with_sink_column(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, K, V with the sink's key column (last) and ``SINK_DIMS`` more dimensions (module docstring)."""
        b, hk, s, d = k.shape
        k2 = k.new_zeros(b, hk, s + 1, d + SINK_DIMS)
        v2 = v.new_zeros(b, hk, s + 1, d + SINK_DIMS)
        k2[:, :, :s, :d] = k
        v2[:, :, :s, :d] = v
        k2[:, :, s, d : d + 2] = 1.0  # the sink key: q_extra . (1, 1) = sink / scale
        q2 = torch.cat([q, self.q_extra[None, :, None, :].expand(b, -1, q.shape[2], -1)], dim=-1)
        return q2, k2, v2


class SdpaCandidate(Candidate):
    """TORCH_SDPA's tactics as SDPA kernels (flash, efficient, cudnn, math); only ``math`` runs on the CPU."""

    backend = "TORCH_SDPA"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if device == "cpu" and tactic != "math":
            return f"SDPA's {tactic} kernel runs on CUDA only"
        return None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic not in _KERNELS:
            raise Unsupported(f"TORCH_SDPA has no tactic {tactic!r}")
        return SdpaRunner(tactic)
