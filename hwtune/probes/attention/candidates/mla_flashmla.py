"""FLASHMLA: DeepSeek's FlashMLA dense decode kernel for Hopper as vLLM ships it (``vllm._flashmla_C``, called
through ``vllm.third_party.flashmla.flash_mla_interface``: ``get_mla_metadata`` and ``flash_mla_with_kvcache``), the
way vLLM's FlashMLA backend calls it (vllm v1/attention/backends/mla/flashmla.py ``FlashMLAImpl.forward_mqa``).

The kernel reads the absorbed query as ``[batch, query_len, heads, 576]`` (every request the same number of query
tokens: decode, or speculative decode with causal masking) and the latent cache as ``[pages, 64, 1, 576]``, writes
the latent output into ``out`` viewed as ``[batch, 1, query_len x heads, 512]`` (the shape it checks an ``out``
against: one KV head, queries grouped under it) and returns the LSE ``[batch, heads, query_len]``. Its tile
schedule is made by the first call on a fresh ``FlashMLASchedMeta`` and reused by later calls of the same batch, as
vLLM's layers after the first reuse it: ``prepare`` makes it (untimed) and keeps its tensors at fixed addresses,
copying a later batch's schedule into them, so a captured CUDA graph reads the new one.

Prefill is not FlashMLA's: vLLM runs the prefill of every MLA backend through its non-absorbed MLA prefill path, which
hwtune measures as FLASHINFER_FA_MLA's ``mha-*`` tactics. The fp8 path (fp8 queries with descale factors,
``flash_mla_with_kvcache_fp8``) is not wired here.
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
from hwtune.probes.attention.candidates.mla_base import MlaRunner, as_mla
from hwtune.probes.attention.mla import MlaProblem
from hwtune.probes.attention.problem import AttentionProblem

PAGE = 64  # FlashMLA's page size (vllm FlashMLABackend.get_supported_kernel_block_sizes -> [64])


def _interface() -> Any:
    from vllm.third_party.flashmla import flash_mla_interface

    return flash_mla_interface


class FlashMlaRunner(MlaRunner):
    """One FlashMLA decode call per batch; the tile schedule is made in ``prepare`` and kept at fixed addresses."""

    returns_lse = True
    supports_graphs = True

    def __init__(self) -> None:
        super().__init__()
        self.fm = _interface()
        self.meta: Any = None
        self.problem: MlaProblem | None = None

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        if p.is_fp8:
            raise Unsupported("hwtune's FLASHMLA candidate runs 16-bit latent caches only (the fp8 path is not wired)")
        if p.page_size != PAGE:
            raise Unsupported(f"FlashMLA pages the latent cache by {PAGE} tokens (this cache has {p.page_size})")
        if len(set(p.query_lens)) != 1:
            raise Unsupported("FlashMLA takes the same number of query tokens for every request (decode batches)")
        self._alloc(p, lse=True)
        self.problem = p
        old = self.meta
        self.meta = self.fm.get_mla_metadata()[0]
        self._call()  # the first call on a fresh schedule makes it (not timed)
        if old is not None:  # a later batch of the same shapes: its schedule into the captured graph's tensors
            new = self.meta
            same = (old.tile_scheduler_metadata.shape, old.num_splits.shape)
            if same != (new.tile_scheduler_metadata.shape, new.num_splits.shape):
                raise RuntimeError("FlashMLA's schedule changed shape between two batches of the same shapes")
            old.tile_scheduler_metadata.copy_(new.tile_scheduler_metadata)
            old.num_splits.copy_(new.num_splits)
            old.config = new.config
            self.meta = old

    def _call(self) -> None:
        p = self.problem
        assert p is not None and p.dims is not None and self.out is not None and self.lse is not None
        b, s = p.batch, p.max_query_len
        h = p.spec.num_heads
        _, lse = self.fm.flash_mla_with_kvcache(
            p.q.view(b, s, h, -1),
            p.kv_cache.unsqueeze(-2),
            p.block_table,
            p.seq_lens,
            p.dims.lora,
            self.meta,
            softmax_scale=p.softmax_scale,
            causal=p.causal,
            out=self.out.view(b, 1, s * h, -1),  # the kernel's own layout: (batch, kv heads, tokens x heads, 512)
        )
        if tuple(lse.shape) != (b, h, s):  # the documented (batch, heads, query tokens)
            raise RuntimeError(f"FlashMLA returned an LSE of shape {tuple(lse.shape)}, not {(b, h, s)}")
        self.lse.view(b, s, h).copy_(lse.transpose(1, 2))

    def run(self) -> None:
        self._call()


class FlashMlaCandidate(Candidate):
    """FLASHMLA's one tactic, decode only; needs a CUDA device of SM 9.x and vLLM's ``_flashmla_C`` (each missing
    piece is the reason given)."""

    backend = "FLASHMLA"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if device != "cuda" or not torch.cuda.is_available():
            return "FlashMLA runs on CUDA GPUs only"
        if torch.cuda.get_device_capability()[0] != 9:
            return (
                "vLLM's dense FlashMLA runs on Hopper (SM 9.x) only (vllm ops/flashmla.py is_flashmla_dense_supported)"
            )
        try:
            _interface()
        except Exception as exc:  # ImportError: vllm missing, or _flashmla_C not built for this torch/CUDA
            return import_failure("vllm's FlashMLA (vllm._flashmla_C)", exc)
        return None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic != "default":
            raise Unsupported(f"FLASHMLA has one tactic, 'default' (not {tactic!r})")
        refuse_unmeasured_phase(self.backend, workload)
        return FlashMlaRunner()
