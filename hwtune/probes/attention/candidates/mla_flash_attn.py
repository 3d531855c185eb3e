"""FLASH_ATTN_MLA: vLLM's FlashAttention-3 MLA decode (``vllm.vllm_flash_attn``), called the way vLLM's backend calls it
(vllm v1/attention/backends/mla/flashattn_mla.py ``FlashAttnMLAImpl.forward_mqa``): the rope part of the absorbed query
and of the latent cache as FA3's query and key (``q_pe`` [tokens, heads, 64], ``k_pe`` [pages, page, 1, 64]), the latent
part as FA3's value-sized extra query and its value (``q_v = q_nope`` [tokens, heads, 512], ``v = ckv`` [pages, page, 1,
512]), so that the score is ``q_pe . k_pe + q_nope . ckv``; ``causal=True`` (speculative-decode tokens), the LSE
returned ([heads, tokens], natural log; kept as returned and transposed in ``lse_natural``, outside the timed call).
FA3's tile schedule is made in ``prepare`` as vLLM's metadata builder makes it (``get_scheduler_metadata`` with
``headdim_v``), and the batch runs as vLLM runs it (``flash_attn.vllm_fa3_mode``): a uniform decode batch of up to 512
tokens replayed from a CUDA graph with FA3's splits capped at 32 (vllm mla/flashattn_mla.py: ``max_num_splits`` under
full graphs), a larger one called eagerly with FA3's own heuristic. Decode only, 16-bit caches only (vLLM: 'FP8
FlashAttention MLA not yet supported'); vLLM runs MLA prefill through its non-absorbed path.
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import (
    Candidate,
    Runner,
    Unsupported,
    import_failure,
    refuse_unmeasured_phase,
)
from hwtune.probes.attention.candidates.flash_attn import (
    extension_missing,
    fa3_schedule,
    flash_attn_module,
    in_place,
    vllm_fa3_mode,
)
from hwtune.probes.attention.candidates.mla_base import MlaRunner, as_mla
from hwtune.probes.attention.mla import MlaProblem
from hwtune.probes.attention.problem import AttentionProblem


class FlashAttnMlaRunner(MlaRunner):
    """One FA3 call per batch with the latent split into its rope and value-sized parts."""

    returns_lse = True

    def __init__(self) -> None:
        super().__init__()
        found = flash_attn_module()
        assert found is not None and found[0] == "vllm_flash_attn"
        self.mod = found[1]
        self.problem: MlaProblem | None = None
        self.schedule: Any = None
        self.num_splits = 0  # FA3's split cap, set in prepare: 0 (its heuristic) or 32 (vllm_fa3_mode)
        self.supports_graphs = False  # set in prepare: vllm_fa3_mode

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        assert p.dims is not None
        if p.is_fp8:
            raise Unsupported(
                "vLLM's FLASH_ATTN_MLA takes 16-bit caches only ('FP8 FlashAttention MLA not yet supported')"
            )
        graphed, splits = vllm_fa3_mode(p)
        schedule = fa3_schedule(
            self.mod, p, num_heads_kv=1, headdim=p.dims.rope, headdim_v=p.dims.lora, num_splits=splits
        )
        (self.schedule,) = in_place((self.schedule, schedule))
        self._alloc(p, lse=False)
        self.problem, self.supports_graphs, self.num_splits = p, graphed, splits

    def run(self) -> None:
        p = self.problem
        assert p is not None and p.dims is not None and self.out is not None
        lora = p.dims.lora
        _, self.lse = self.mod.flash_attn_varlen_func(
            q=p.q[..., lora:],
            k=p.kv_cache[..., lora:].unsqueeze(-2),
            v=p.kv_cache[..., :lora].unsqueeze(-2),
            q_v=p.q[..., :lora],
            max_seqlen_q=p.max_query_len,
            cu_seqlens_q=p.query_start_loc,
            max_seqlen_k=p.max_seq_len,
            seqused_k=p.seq_lens,
            block_table=p.block_table,
            softmax_scale=p.softmax_scale,
            causal=True,
            return_softmax_lse=True,
            fa_version=3,
            scheduler_metadata=self.schedule,
            num_splits=self.num_splits,
            out=self.out,
        )

    def lse_natural(self) -> torch.Tensor | None:
        """The last call's LSE as [tokens, heads] (``self.lse`` is as FA3 returns it, heads first); not timed."""
        return None if self.lse is None else self.lse.transpose(0, 1)


class FlashAttnMlaCandidate(Candidate):
    """FLASH_ATTN_MLA's one tactic, decode only; needs a CUDA device of SM 9.x and vllm_flash_attn's FA3 extension
    (each missing piece is the reason given)."""

    backend = "FLASH_ATTN_MLA"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if device != "cuda" or not torch.cuda.is_available():
            return "FlashAttention-3 runs on CUDA GPUs only"
        if torch.cuda.get_device_capability()[0] != 9:
            return "FlashAttention-3 (vLLM's FLASH_ATTN_MLA) runs on Hopper (SM 9.x) only"
        try:
            found = flash_attn_module()
        except Exception as exc:  # vllm's import, or vllm_flash_attn's when neither extension loads
            return import_failure("vllm.vllm_flash_attn", exc)
        if found is None or found[0] != "vllm_flash_attn":
            return "vLLM's FLASH_ATTN_MLA needs vllm's vllm_flash_attn (FA3 with q_v); it is not installed"
        return extension_missing(*found, 3)

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic != "default":
            raise Unsupported(f"FLASH_ATTN_MLA has one tactic, 'default' (not {tactic!r})")
        refuse_unmeasured_phase(self.backend, workload)
        return FlashAttnMlaRunner()
