"""HWTUNE_TORCH_MLA: absorbed MLA decode in plain PyTorch ops, on the CPU and on CUDA (hwtune's portable baseline).

Like TORCH_SDPA, the pages are gathered into padded per-request latent rows inside the timed call (what an engine
without a paged MLA kernel must do each step), then ``scores = q . latent`` over the whole 576-wide row, a masked
softmax in float32 (its LSE is returned, natural log) and ``out = p @ ckv``. Matmuls run in float32 on the CPU and
in the model dtype on CUDA; an fp8 latent cache is dequantised with its scale after the gather. Speculative-decode
queries are causal among the new tokens; ``problem.causal = False`` (a DCP share) lets every query see the whole KV.
"""

from __future__ import annotations

import math

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported
from hwtune.probes.attention.candidates.mla_base import MlaRunner, as_mla
from hwtune.probes.attention.mla import MlaProblem
from hwtune.probes.attention.problem import AttentionProblem, _cumsum

#: Score elements per chunk of query rows (float32): about 1 GiB.
_CHUNK_ELEMENTS = 1 << 28


class TorchMlaRunner(MlaRunner):
    """Gather, ``einsum`` scores over the latent rows, masked float32 softmax with LSE, ``einsum`` with ckv."""

    returns_lse = True
    supports_non_causal = True

    def __init__(self) -> None:
        super().__init__()
        self.problem: MlaProblem | None = None

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        self._alloc(p, lse=True)
        self.problem = p
        dev = p.q.device
        seq = torch.tensor(p.seq_lens_list, device=dev)[:, None, None]
        ql = torch.tensor(p.query_lens, device=dev)[:, None, None]
        self.length, self.mq = p.max_seq_len, p.max_query_len
        qi = torch.arange(self.mq, device=dev)[None, :, None]
        kj = torch.arange(self.length, device=dev)[None, None, :]
        valid_q = qi < ql
        limit = seq - ql + qi if p.causal else seq - 1
        mask = (kj <= limit) & (kj < seq) & valid_q
        mask[:, :, 0] |= ~valid_q[:, :, 0]  # padding query rows see one key, so no row divides by zero
        self.mask = mask[:, None]  # [B, 1, Mq, S]
        starts = torch.tensor([0] + _cumsum(p.query_lens)[:-1], device=dev)
        offs = torch.arange(self.mq, device=dev)[None, :]
        self.q_valid = offs < ql[:, :, 0]  # [B, Mq]
        self.q_src = torch.where(self.q_valid, starts[:, None] + offs, torch.zeros_like(offs)).reshape(-1)
        self.work = torch.float32 if dev.type == "cpu" else p.q.dtype

    def _latent(self, p: MlaProblem) -> torch.Tensor:
        """The requests' latent rows, padded: ``[batch, max_seq_len, lora + rope]`` in the working dtype."""
        rows = p.kv_cache[p.block_table.long()]  # [B, pages, page, L]
        rows = rows.reshape(p.batch, -1, rows.shape[-1])[:, : self.length]
        if p.is_fp8:
            return (rows.float() * p.kv_scale).to(self.work)
        return rows.to(self.work)

    def run(self) -> None:
        p = self.problem
        assert p is not None and p.dims is not None and self.out is not None and self.lse is not None
        latent = self._latent(p)
        q = p.q[self.q_src].reshape(p.batch, self.mq, *p.q.shape[1:]).to(self.work)  # [B, Mq, H, L]
        out = torch.empty(*q.shape[:3], p.dims.lora, dtype=self.work, device=q.device)
        lse = torch.empty(p.batch, p.spec.num_heads, self.mq, dtype=torch.float32, device=q.device)
        chunk = max(1, _CHUNK_ELEMENTS // max(1, p.batch * p.spec.num_heads * self.length))
        for c0 in range(0, self.mq, chunk):  # query rows in chunks: the scores of a long prefill stay bounded
            c1 = min(self.mq, c0 + chunk)
            scores = torch.einsum("bmhl,bsl->bhms", q[:, c0:c1], latent).float() * p.softmax_scale
            scores = scores.masked_fill(~self.mask[:, :, c0:c1], -math.inf)
            lse[..., c0:c1] = torch.logsumexp(scores, dim=-1)  # [B, H, c]
            probs = torch.exp(scores - lse[..., c0:c1, None]).to(self.work)
            out[:, c0:c1] = torch.einsum("bhms,bsl->bmhl", probs, latent[..., : p.dims.lora])
        self.out.copy_(out[self.q_valid])
        self.lse.copy_(lse.transpose(1, 2)[self.q_valid])


class TorchMlaCandidate(Candidate):
    """HWTUNE_TORCH_MLA's absorbed tactic ``eager`` and its non-absorbed prefill tactics ``mha-*``
    (``mla_prefill_torch``): run wherever torch does (SDPA's fused kernels where torch has them)."""

    backend = "HWTUNE_TORCH_MLA"

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic.startswith("mha-"):
            from hwtune.probes.attention.candidates.mla_prefill_torch import TorchMlaPrefillRunner

            return TorchMlaPrefillRunner(tactic)
        if tactic != "eager":
            raise Unsupported(f"HWTUNE_TORCH_MLA has no tactic {tactic!r}")
        return TorchMlaRunner()
