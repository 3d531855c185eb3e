"""MLA (multi-head latent attention, DeepSeek-V2/V3, Kimi-K2) decode as engines run it: the absorbed form.

The cache holds one latent KV head per token, ``[num_pages, page_size, kv_lora_rank + qk_rope_head_dim]``
(512 + 64 = 576 for DeepSeek-V3: ``ckv`` then ``kpe``), as vLLM lays out its MLA cache. A candidate gets the
absorbed query ``q = [q_nope @ W_UK^T, q_pe]`` ``[tokens, heads, 576]`` and writes the latent output
``[tokens, heads, kv_lora_rank]`` (V is the ckv part) and, where it can, the natural-log LSE. The softmax scale is
``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)`` (1/sqrt(192) for DeepSeek-V3): the head size before absorption.

The float32 reference does not use the absorption trick: it up-projects the latent with random per-head ``W_UK``
and ``W_UV`` into ordinary multi-head attention, ``K = [ckv @ W_UK, kpe]`` and ``V = ckv @ W_UV``, with the
original ``q_nope`` and ``q_pe``, and the candidate's latent output is compared after projection by ``W_UV``. A
kernel that swaps ckv and kpe, drops the rope part, or uses the latent width for the scale disagrees with it. That
attention (causal aligned to the end of each context) is also exactly what the engines' non-absorbed prefill computes
(``candidates/mla_prefill_base.py``): its runners build q/K/V the engine's way from this problem's latent cache and
weights, write ``[tokens, heads, v]`` and are compared with this same reference without the projection.

Pages are in random order and unowned slots are poisoned (``problem.POISON``), as for ``AttentionProblem``; an fp8
(e4m3) cache holds the latent divided by one per-tensor scale (``k_scale == v_scale``), as vLLM quantises its MLA
cache with the layer's k scale. The weights are the model's: a second batch written into a problem's buffers keeps
them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.problem import (
    FP8_MAX,
    POISON,
    AttentionProblem,
    _cumsum,
    _page_tables,
    _unowned_mask,
    _write_into,
    batch_lengths,
    torch_dtype,
)

#: DeepSeek-V2/V3 and Kimi-K2's per-head query/key width without rope and value width (their config.json
#: ``qk_nope_head_dim`` and ``v_head_dim``), used when a spec does not carry them (``--mla`` without ``--model``).
DEFAULT_NOPE_DIM = 128
DEFAULT_V_DIM = 128


@dataclass(frozen=True)
class MlaDims:
    """The latent widths (``lora`` + ``rope`` = the cache's head size) and the per-head widths before absorption."""

    lora: int
    rope: int
    nope: int
    v: int

    @property
    def latent(self) -> int:
        """Width of one cache row: ckv then kpe."""
        return self.lora + self.rope


def mla_dims(spec: AttentionSpec) -> MlaDims:
    """The MLA widths of ``spec`` (kv_lora_rank, rope, nope, v), defaults for the ones it does not carry."""
    rope = spec.qk_rope_head_dim or 64
    lora = spec.kv_lora_rank or spec.head_size - rope
    return MlaDims(lora, rope, spec.qk_nope_head_dim or DEFAULT_NOPE_DIM, spec.v_head_dim or DEFAULT_V_DIM)


def mla_softmax_scale(spec: AttentionSpec) -> float:
    """1/sqrt(qk_nope_head_dim + qk_rope_head_dim): the query-key width of the model before absorption."""
    d = mla_dims(spec)
    return 1.0 / math.sqrt(d.nope + d.rope)


@dataclass
class MlaProblem(AttentionProblem):
    """An ``AttentionProblem`` whose cache is the latent ``[pages, page, lora + rope]`` and whose ``q`` is the absorbed
    query; it also keeps what the reference needs: the unabsorbed query parts and the up-projections (float32)."""

    dims: MlaDims | None = None
    q_nope: torch.Tensor | None = None  # [tokens, heads, nope] float32 (values of the model dtype)
    q_pe: torch.Tensor | None = None  # [tokens, heads, rope] float32
    w_uk: torch.Tensor | None = None  # [heads, lora, nope] float32: k_nope = ckv @ w_uk[h]
    w_uv: torch.Tensor | None = None  # [heads, lora, v] float32: v = ckv @ w_uv[h]
    is_mla: bool = True

    @property
    def kv_scale(self) -> float:
        """The latent cache's one dequantisation scale (1.0 unless fp8)."""
        return self.k_scale

    def ckv_cache(self) -> torch.Tensor:
        """The compressed-KV part of every cache row, a strided view ``[pages, page, lora]``."""
        assert self.dims is not None
        return self.kv_cache[..., : self.dims.lora]

    def kpe_cache(self) -> torch.Tensor:
        """The rope-key part of every cache row, a strided view ``[pages, page, rope]``."""
        assert self.dims is not None
        return self.kv_cache[..., self.dims.lora :]

    def k_cache(self) -> torch.Tensor:
        """Not for MLA: refused, so that a non-MLA runner handed an MLA problem fails loudly."""
        raise TypeError("an MLA problem has one latent cache (ckv_cache, kpe_cache), not separate K and V")

    def v_cache(self) -> torch.Tensor:
        """Not for MLA: refused, as ``k_cache``."""
        raise TypeError("an MLA problem has one latent cache (ckv_cache, kpe_cache), not separate K and V")

    def gather_latent(self, r: int) -> torch.Tensor:
        """Request ``r``'s latent rows through the block table, float32 ``[seq_len, lora + rope]``, dequantised."""
        n = self.seq_lens_list[r]
        pages = self.block_table[r, : math.ceil(n / self.page_size)].long()
        rows = self.kv_cache[pages].float().reshape(-1, self.kv_cache.shape[-1])[:n]
        return rows * self.kv_scale if self.is_fp8 else rows

    def project(self, latent_out: torch.Tensor) -> torch.Tensor:
        """A latent output ``[tokens, heads, lora]`` projected by ``W_UV`` per head: ``[tokens, heads, v]`` float32."""
        assert self.w_uv is not None
        return torch.einsum("thl,hlv->thv", latent_out.float(), self.w_uv)


def _weights(spec: AttentionSpec, dims: MlaDims, g: torch.Generator, device: torch.device) -> tuple:
    """Random ``W_UK`` and ``W_UV`` scaled so that the up-projected keys and values have unit variance."""
    shape = (spec.num_heads, dims.lora)
    w_uk = torch.randn(*shape, dims.nope, generator=g, device=device) / math.sqrt(dims.lora)
    w_uv = torch.randn(*shape, dims.v, generator=g, device=device) / math.sqrt(dims.lora)
    return w_uk, w_uv


def _latent_cache(
    kv: torch.Tensor, kv_cache_dtype: str, unowned: torch.Tensor, like: MlaProblem | None
) -> tuple[torch.Tensor, float]:
    """The latent cache in the spec's kv-cache dtype and its scale (one per tensor, fixed for the cache's life)."""
    if kv_cache_dtype == "fp8_e4m3":
        if like is not None:
            scale = like.kv_scale
        else:
            scale = float(kv.abs().masked_fill(unowned[:, :, None], 0).max().float()) / FP8_MAX
        return (kv.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale
    if kv_cache_dtype in ("auto", "bfloat16", "float16"):
        return kv if kv_cache_dtype == "auto" else kv.to(torch_dtype(kv_cache_dtype)), 1.0
    raise ValueError(f"hwtune's MLA problem builder has no {kv_cache_dtype} latent cache")


def _queries(
    spec: AttentionSpec, dims: MlaDims, tokens: int, w_uk: torch.Tensor, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(absorbed q in the model dtype, q_nope and q_pe as float32): the unabsorbed parts are drawn in the model
    dtype, so the reference sees exactly the values an engine's query projection would hand over."""
    dtype, dev = torch_dtype(spec.dtype), w_uk.device
    q_nope = torch.randn(tokens, spec.num_heads, dims.nope, generator=g, dtype=dtype, device=dev).float()
    q_pe = torch.randn(tokens, spec.num_heads, dims.rope, generator=g, dtype=dtype, device=dev).float()
    q_lat = torch.einsum("thc,hlc->thl", q_nope, w_uk)  # q_nope @ W_UK^T, per head
    return torch.cat([q_lat, q_pe], dim=-1).to(dtype), q_nope, q_pe


def build_mla_problem(
    workload: AttentionWorkload,
    device: str | torch.device,
    *,
    seed: int = 0,
    like: AttentionProblem | None = None,
    lengths: tuple[list[int], list[int]] | None = None,
) -> MlaProblem:
    """Random MLA inputs for ``workload`` (module docstring), with ``build_problem``'s contract for ``like``
    (written into its buffers, its weights kept) and ``lengths``."""
    spec, device = workload.spec, torch.device(device)
    dims = mla_dims(spec)
    if spec.head_size != dims.latent:
        raise ValueError(f"an MLA cache row is kv_lora_rank + rope = {dims.latent} wide, not {spec.head_size}")
    g, gdev = torch.Generator().manual_seed(seed), torch.Generator(device=device).manual_seed(seed)
    query_lens, seq_lens = lengths or batch_lengths(workload)
    page = spec.block_size
    pages_per = [math.ceil(s / page) for s in seq_lens]
    total_pages, max_pages = sum(pages_per) + 1, max(pages_per)
    if like is not None:
        if not isinstance(like, MlaProblem) or like.batch != len(seq_lens) or like.num_tokens != sum(query_lens):
            raise ValueError("build_mla_problem(like=...) needs an MLA problem of the same batch and tokens")
        total_pages, max_pages = like.kv_cache.shape[0], like.block_table.shape[1]
    block_table, indices, indptr = _page_tables(pages_per, total_pages, max_pages, g)
    last_page = [s - (n - 1) * page for s, n in zip(seq_lens, pages_per)]
    kv = torch.randn(total_pages, page, dims.latent, generator=gdev, dtype=torch_dtype(spec.dtype), device=device)
    unowned = _unowned_mask(block_table, seq_lens, total_pages, page).to(device)
    kv.masked_fill_(unowned[:, :, None], POISON)
    kv, scale = _latent_cache(kv, spec.kv_cache_dtype, unowned, like)
    w_uk, w_uv = (like.w_uk, like.w_uv) if like is not None else _weights(spec, dims, gdev, device)
    q, q_nope, q_pe = _queries(spec, dims, sum(query_lens), w_uk, gdev)
    meta = (
        block_table.to(device),
        torch.tensor(seq_lens, dtype=torch.int32, device=device),
        torch.tensor(last_page, dtype=torch.int32, device=device),
        torch.tensor([0] + _cumsum(query_lens), dtype=torch.int32, device=device),
    )
    if like is not None:  # same addresses as the previous batch (a captured graph reads them)
        kv, q, *meta = _write_into(like, kv, q, *meta)
    return MlaProblem(
        workload=workload,
        layout="NHD",
        q=q,
        kv_cache=kv,
        k_scale=scale,
        v_scale=scale,
        query_lens=query_lens,
        seq_lens_list=seq_lens,
        block_table=meta[0],
        seq_lens=meta[1],
        query_start_loc=meta[3],
        kv_indptr=torch.tensor(indptr, dtype=torch.int32, device=device),
        kv_indices=torch.cat(indices).to(device),
        kv_last_page_len=meta[2],
        softmax_scale=mla_softmax_scale(spec),
        seed=seed,
        dims=dims,
        q_nope=q_nope,
        q_pe=q_pe,
        w_uk=w_uk,
        w_uv=w_uv,
    )


#: Score-matrix elements per chunk of query rows (float32): about 1 GiB, as the non-MLA reference.
_CHUNK_ELEMENTS = 1 << 28


def _up_projected(problem: MlaProblem, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Request ``r``'s keys ``[heads, n, nope + rope]`` = [ckv @ W_UK, kpe], values ``[heads, n, v]`` = ckv @ W_UV."""
    assert problem.dims is not None
    latent = problem.gather_latent(r)
    ckv, kpe = latent[:, : problem.dims.lora], latent[:, problem.dims.lora :]
    heads = problem.spec.num_heads
    k = torch.cat([torch.einsum("nl,hlc->hnc", ckv, problem.w_uk), kpe.expand(heads, -1, -1)], dim=-1)
    return k, torch.einsum("nl,hlv->hnv", ckv, problem.w_uv)


def reference_mla(problem: MlaProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): float32 ``[tokens, heads, v]`` and natural-log ``[tokens, heads]`` of ordinary multi-head attention
    over the up-projected latent (module docstring), causal over the new tokens unless ``problem.causal`` is False."""
    assert problem.dims is not None and problem.q_nope is not None and problem.q_pe is not None
    heads, dev = problem.spec.num_heads, problem.q.device
    out = torch.empty(problem.num_tokens, heads, problem.dims.v, dtype=torch.float32, device=dev)
    lse = torch.empty(problem.num_tokens, heads, dtype=torch.float32, device=dev)
    for r in range(problem.batch):
        k, v = _up_projected(problem, r)
        sl = problem.query_slice(r)
        q = torch.cat([problem.q_nope[sl], problem.q_pe[sl]], dim=-1).transpose(0, 1)  # [h, m, nope + rope]
        m, n = q.shape[1], k.shape[1]
        chunk = max(1, _CHUNK_ELEMENTS // max(1, heads * n))
        for c0 in range(0, m, chunk):
            c1 = min(m, c0 + chunk)
            scores = torch.matmul(q[:, c0:c1], k.transpose(1, 2)) * problem.softmax_scale  # [h, c, n]
            if problem.causal:
                pos = torch.arange(n - m + c0, n - m + c1, device=dev)[:, None]
                scores = scores.masked_fill(torch.arange(n, device=dev)[None, :] > pos, -math.inf)
            row_lse = torch.logsumexp(scores, dim=-1)  # [h, c]
            out[sl][c0:c1] = torch.matmul(torch.exp(scores - row_lse[..., None]), v).transpose(0, 1)
            lse[sl][c0:c1] = row_lse.transpose(0, 1)
    return out, lse


__all__ = [
    "DEFAULT_NOPE_DIM",
    "DEFAULT_V_DIM",
    "MlaDims",
    "MlaProblem",
    "build_mla_problem",
    "mla_dims",
    "mla_softmax_scale",
    "reference_mla",
]
