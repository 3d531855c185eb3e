"""FLASHINFER_FA_MLA: FlashInfer's ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` (API of flashinfer 0.6.18),
tactics ``fa2`` and ``fa3`` (its ``backend=`` values; fa3 is the SM 9.0 kernel). SGLang's flashinfer MLA backend runs
this wrapper; vLLM's FLASHINFER_MLA is another kernel (trtllm-gen, Blackwell). The ``mha-*`` tactics are the
non-absorbed prefill through FlashInfer's ragged wrapper and cuDNN (``mla_prefill_flashinfer``).

The wrapper takes the absorbed query as ``q_nope`` [tokens, heads, 512] and ``q_pe`` [tokens, heads, 64] and the
cache as ``ckv_cache`` [pages, page, 512] and ``kpe_cache`` [pages, page, 64]: here strided views of the one latent
query and cache (its kernels take page and token strides), as SGLang hands them over. It is built with
``use_cuda_graph=True`` on fixed metadata buffers, so a re-plan for the next batch is seen by a captured graph.
``plan(..., causal=problem.causal)`` masks speculative-decode tokens causally (bottom-right, like FlashInfer's
prefill). The LSE comes back in base 2 (``return_lse_base_on_e=False``, the default): ``lse_natural`` converts it
outside the timed call. An fp8 (e4m3) latent cache takes ``ckv_scale``/``kpe_scale`` (FlashInfer 0.6.18, SM 9.0,
bf16 queries only).
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import LN2, Candidate, Runner, Unsupported, import_failure
from hwtune.probes.attention.candidates.mla_base import MlaRunner, as_mla
from hwtune.probes.attention.mla import MlaProblem
from hwtune.probes.attention.problem import AttentionProblem

WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace for the MLA wrapper
TACTICS = ("fa2", "fa3")


def _wrapper_class() -> Any:
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    return BatchMLAPagedAttentionWrapper


def _takes_fp8_scales() -> bool:
    """Whether ``run`` takes ``ckv_scale``/``kpe_scale`` (FlashInfer 0.6.18's fp8 MLA cache), read from its signature
    as vLLM does (vllm utils/flashinfer.py has_flashinfer_sm90_nope_mla)."""
    import inspect

    try:
        return "ckv_scale" in inspect.signature(_wrapper_class().run).parameters
    except (TypeError, ValueError):
        return False


class FlashInferMlaRunner(MlaRunner):
    """One ``BatchMLAPagedAttentionWrapper`` (``backend=tactic``, graph mode on fixed buffers), planned per batch."""

    returns_lse = True
    supports_graphs = True
    supports_non_causal = True  # plan(causal=problem.causal)

    def __init__(self, tactic: str) -> None:
        super().__init__()
        self.tactic = tactic
        self.wrapper: Any = None
        self.problem: MlaProblem | None = None

    def lse_natural(self) -> torch.Tensor | None:
        return None if self.lse is None else self.lse * LN2

    def _build(self, p: MlaProblem) -> None:
        dev = p.q.device
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        self.bufs = dict(
            qo_indptr=torch.empty(p.batch + 1, dtype=torch.int32, device=dev),
            kv_indptr=torch.empty(p.batch + 1, dtype=torch.int32, device=dev),
            kv_indices=torch.empty(p.kv_cache.shape[0], dtype=torch.int32, device=dev),
            kv_len_arr=torch.empty(p.batch, dtype=torch.int32, device=dev),
        )
        self.wrapper = _wrapper_class()(self.workspace, use_cuda_graph=True, backend=self.tactic, **self.bufs)

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        assert p.dims is not None
        if p.is_fp8 and p.q.dtype != torch.bfloat16:
            raise Unsupported("FlashInfer's fp8 MLA cache takes bf16 queries only (BatchMLAPagedAttentionWrapper.plan)")
        if p.is_fp8 and not _takes_fp8_scales():
            raise Unsupported(
                "this flashinfer's BatchMLAPagedAttentionWrapper.run takes no ckv_scale (FlashInfer 0.6.18+)"
            )
        self._alloc(p, lse=True)
        self.problem = p
        if self.wrapper is None:
            self._build(p)
        self.wrapper.plan(
            p.query_start_loc,
            p.kv_indptr,
            p.kv_indices,
            p.seq_lens,
            p.spec.num_heads,
            p.dims.lora,
            p.dims.rope,
            p.page_size,
            p.causal,
            p.softmax_scale,
            p.q.dtype,
            p.kv_cache.dtype,
        )

    def run(self) -> None:
        p = self.problem
        assert p is not None and p.dims is not None
        lora = p.dims.lora
        scales = dict(ckv_scale=p.kv_scale, kpe_scale=p.kv_scale) if p.is_fp8 else {}
        self.wrapper.run(
            p.q[..., :lora],
            p.q[..., lora:],
            p.kv_cache[..., :lora],
            p.kv_cache[..., lora:],
            out=self.out,
            lse=self.lse,
            return_lse=True,
            **scales,
        )


class FlashInferMlaCandidate(Candidate):
    """FLASHINFER_FA_MLA: needs a CUDA device, a CUDA build of torch, and a flashinfer whose ``flashinfer.mla``
    imports and has ``BatchMLAPagedAttentionWrapper`` (each missing piece is the reason given)."""

    backend = "FLASHINFER_FA_MLA"

    def _unavailable(self, device: str) -> str | None:
        if device != "cuda":
            return "FlashInfer's MLA kernels run on CUDA GPUs only"
        if torch.version.cuda is None:
            return f"FlashInfer needs a CUDA build of torch (installed: torch {torch.__version__})"
        try:
            _wrapper_class()
        except Exception as exc:  # ImportError, or FlashInfer's own assertion at import
            return import_failure("flashinfer.mla.BatchMLAPagedAttentionWrapper", exc)
        return None

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        reason = self._unavailable(device)
        if reason is None and tactic == "mha-cudnn":
            from hwtune.probes.attention.candidates.flashinfer import cudnn_unavailable

            return cudnn_unavailable(cubin_fallback=False)
        return reason

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic.startswith("mha-"):  # the non-absorbed prefill (mla_prefill_flashinfer)
            from hwtune.probes.attention.candidates.mla_prefill_flashinfer import prefill_runner

            return prefill_runner(tactic)
        if tactic not in TACTICS:
            raise Unsupported(f"FLASHINFER_FA_MLA has no tactic {tactic!r}; its tactics: {', '.join(TACTICS)}")
        return FlashInferMlaRunner(tactic)
