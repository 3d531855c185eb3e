"""MLA prefill in the non-absorbed ("dense MHA") form the engines run, and what its candidates share.

vLLM 0.33.0 (``model_executor/layers/attention/mla_attention.py`` ``MLACommonBaseImpl.forward_mha`` and
``_compute_prefill_context``) prefills an MLA layer as ordinary multi-head attention: it gathers the latent rows of
each request's context from the paged cache (``ops.gather_and_maybe_dequant_cache``: an fp8 cache is dequantised to
the model dtype), up-projects the compressed part with ``kv_b_proj`` (one GEMM, output ``[tokens, heads, nope + v]``),
splits it into ``k_nope`` and ``v``, and concatenates ``k = [k_nope, k_pe]`` with the rope key shared by every head
(``_concat_k_nope_k_pe``). The attention is then causal with ``head_dim_qk = nope + rope`` (192) and
``head_dim_vo = v`` (128), softmax scale ``1/sqrt(192)``. SGLang's flashinfer MLA backend does the same through
FlashInfer's ragged wrapper for an extend batch without a cached prefix (``flashinfer_mla_backend.py``, use_ragged).

``prefill_inputs`` is that engine-side preparation, written apart from the reference (``mla.reference_mla`` builds
its keys per head from ``W_UK`` and ``W_UV``; this builds the engine's ``kv_b_proj`` weight, ``[lora, heads * (nope
+ v)]``, and splits its output by columns), so a mistake in it (V from the wrong columns, the rope key not
broadcast) disagrees with the reference.

**What is timed.** ``prepare`` (untimed) gathers, up-projects and concatenates: that work is the same for every
prefill backend (the engine does it before calling the backend), so it does not tell backends apart. ``run`` (timed)
is the attention kernel alone: q ``[tokens, heads, 192]`` against each request's whole context (cached prefix and
the new tokens) as ragged K ``[kv_tokens, heads, 192]`` and V ``[kv_tokens, heads, 128]``, causal aligned to the end
(bottom-right: new token ``i`` of ``m`` on a context of ``n`` sees keys ``0 .. n - m + i``). vLLM splits that into
two kernel calls (the new tokens causally among themselves, then the cached prefix in workspace-sized chunks without
a mask) and merges them by LSE (``merge_attn_states``); the one call here does the same attention work, without the
merge, which is the same for every backend. The output is ``[tokens, heads, v_head_dim]`` (not the latent), compared
with the reference directly; the LSE (natural log) where the backend returns it, as vLLM needs it for that merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hwtune.probes.attention.candidates.base import Runner, Unsupported
from hwtune.probes.attention.candidates.mla_base import as_mla
from hwtune.probes.attention.problem import _cumsum

if TYPE_CHECKING:
    from hwtune.probes.attention.mla import MlaProblem
    from hwtune.probes.attention.problem import AttentionProblem


@dataclass
class MlaPrefillInputs:
    """The non-absorbed prefill's tensors in the model dtype, ragged (requests one after another) and contiguous."""

    q: torch.Tensor  # [tokens, heads, nope + rope]
    k: torch.Tensor  # [kv_tokens, heads, nope + rope]: every request's whole context, prefix then new tokens
    v: torch.Tensor  # [kv_tokens, heads, v]
    qo_indptr: torch.Tensor  # int32 [batch + 1] on the device
    kv_indptr: torch.Tensor  # int32 [batch + 1] on the device
    query_lens: list[int]
    kv_lens: list[int]

    @property
    def max_query_len(self) -> int:
        """The longest request's new tokens (kernels size their query tiles from it)."""
        return max(self.query_lens)

    @property
    def max_kv_len(self) -> int:
        """The longest request's keys: its cached prefix and new tokens."""
        return max(self.kv_lens)


def kv_b_proj_weight(p: MlaProblem) -> torch.Tensor:
    """The model's ``kv_b_proj`` weight as the engine applies it, float32 ``[lora, heads * (nope + v)]``: per head,
    the nope key columns (``W_UK``) then the value columns (``W_UV``)."""
    assert p.w_uk is not None and p.w_uv is not None and p.dims is not None
    w = torch.cat([p.w_uk, p.w_uv], dim=-1)  # [heads, lora, nope + v]
    return w.permute(1, 0, 2).reshape(p.dims.lora, -1)


def gather_context(p: MlaProblem) -> torch.Tensor:
    """Every request's latent rows through its block table, one after another, ``[kv_tokens, lora + rope]`` in the
    model dtype (an fp8 cache dequantised with its scale, as ``gather_and_maybe_dequant_cache`` does)."""
    rows = []
    for r, n in enumerate(p.seq_lens_list):
        pages = p.block_table[r, : math.ceil(n / p.page_size)].long()
        rows.append(p.kv_cache[pages].reshape(-1, p.kv_cache.shape[-1])[:n])
    latent = torch.cat(rows)
    if p.is_fp8:
        return (latent.float() * p.kv_scale).to(p.q.dtype)
    return latent.to(p.q.dtype)


def prefill_inputs(p: MlaProblem) -> MlaPrefillInputs:
    """q, K and V of the non-absorbed prefill (module docstring): the up-projection accumulates in float32 and is
    rounded to the model dtype, as a bf16 GEMM with float32 accumulation is."""
    assert p.dims is not None and p.q_nope is not None and p.q_pe is not None
    d, heads, dtype = p.dims, p.spec.num_heads, p.q.dtype
    latent = gather_context(p)
    ckv, kpe = latent[:, : d.lora], latent[:, d.lora :]
    kv_nope = (ckv.float() @ kv_b_proj_weight(p)).to(dtype).view(-1, heads, d.nope + d.v)
    k_nope, v = kv_nope.split([d.nope, d.v], dim=-1)
    k = torch.empty(latent.shape[0], heads, d.nope + d.rope, dtype=dtype, device=latent.device)
    k[..., : d.nope] = k_nope
    k[..., d.nope :] = kpe[:, None, :]  # the rope key, shared by every head
    q = torch.cat([p.q_nope, p.q_pe], dim=-1).to(dtype)
    dev = p.q.device
    return MlaPrefillInputs(
        q=q,
        k=k,
        v=v.contiguous(),
        qo_indptr=torch.tensor([0] + _cumsum(p.query_lens), dtype=torch.int32, device=dev),
        kv_indptr=torch.tensor([0] + _cumsum(p.seq_lens_list), dtype=torch.int32, device=dev),
        query_lens=list(p.query_lens),
        kv_lens=list(p.seq_lens_list),
    )


class MlaPrefillRunner(Runner):
    """A runner of the non-absorbed prefill: ``prepare`` builds ``self.inputs`` (untimed) and calls ``plan``;
    ``out`` is ``[tokens, heads, v_head_dim]`` in the model dtype, compared with the reference without projection."""

    #: The gate compares ``out`` with the reference directly (job.py), not after a W_UV projection.
    latent_output = False

    def __init__(self) -> None:
        super().__init__()
        self.problem: MlaProblem | None = None
        self.inputs: MlaPrefillInputs | None = None
        self.scale = 0.0
        self.extra: dict[str, object] = {
            "mla_prefill": "non-absorbed; timed: the attention kernel (gather, kv_b_proj up-projection and k concat "
            "are not: the same for every backend)"
        }

    def _alloc(self, problem: AttentionProblem, lse: bool) -> None:
        p = as_mla(problem)
        assert p.dims is not None
        shape = (p.num_tokens, p.spec.num_heads, p.dims.v)
        if self.out is None or tuple(self.out.shape) != shape:
            self.out = torch.empty(shape, dtype=p.q.dtype, device=p.q.device)
            self.lse = torch.empty(shape[:2], dtype=torch.float32, device=p.q.device) if lse else None

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        if not p.causal:
            raise Unsupported("hwtune's MLA prefill runners attend the whole context causally; no DCP share path")
        self._alloc(p, lse=self.returns_lse)
        self.problem = p
        self.scale = p.softmax_scale
        self.inputs = self.build_inputs(p)
        self.plan(self.inputs)

    def build_inputs(self, p: MlaProblem) -> MlaPrefillInputs:
        """The engine's gather and up-projection (``prefill_inputs``); untimed."""
        return prefill_inputs(p)

    def plan(self, inputs: MlaPrefillInputs) -> None:  # noqa: B027 - optional hook
        """Per-batch metadata work of the backend (untimed)."""


__all__ = ["MlaPrefillInputs", "MlaPrefillRunner", "gather_context", "kv_b_proj_weight", "prefill_inputs"]
