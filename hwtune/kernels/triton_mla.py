"""HWTUNE_TRITON_MLA: hwtune's MLA decode in Triton, over a paged latent cache (absorbed form).

DeepSeek-V2/V3-style attention after weight absorption is multi-query attention over one latent KV head: each cache
row is ``[ckv (kv_lora_rank), kpe (rope)]`` (512 + 64 for DeepSeek-V3), the query is ``[q_nope @ W_UK^T, q_pe]`` per
head, the score is ``q . row`` and the value is the ckv part itself. So a program loads a KV tile once and feeds it
to every query row it owns: rows are (query token, head) pairs of one request, heads fastest, at most 64 of them
(a ``[64, 512]`` float32 accumulator; 128 heads take two programs, scheduled next to each other so the second
read of a tile comes from L2). The score is two dots (ckv and kpe parts), the output a third (``p @ ckv``).

Query token ``i`` of request ``r`` sits at position ``seq_lens[r] - query_len[r] + i`` and sees KV positions up to
it (speculative decode: causal among the new tokens); ``causal=False`` lets every query see the whole KV (a DCP
share). With ``num_splits > 1`` (flash-decoding) each split writes a normalised partial and its LSE, and
``split_kv.merge_splits`` combines them by LSE. LSE: natural log of the softmax denominator of
``softmax_scale * q.k`` (float32), so partial results over disjoint KV merge exactly (DCP).

Caches: fp16 or bf16 like the query, or float8_e4m3fn with one per-tensor ``kv_scale`` (folded into the softmax
scale and the output; with bf16 queries the dots run in fp16, as TRITON_ATTN's fp8 path does). Any page size: the
page is a compile-time constant and a tile's rows look their pages up one by one. The launch reads no device
memory (CUDA-graph capturable); metadata may change between calls.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hwtune.kernels._common import (
    LOG2E,
    check_lse,
    check_runnable,
    jit_workload_generic,
    num_sms,
    split_tile_range,
    store_result,
)
from hwtune.kernels._tma import tma_device_unsupported
from hwtune.kernels.configs import cdiv
from hwtune.kernels.mla_configs import (  # the tactics live there; re-exported for the candidate and experiments
    _TMA_BLOCK_N,
    MlaConfig,
    default_mla_config,
    mla_config_space,
    workspace_size,
)
from hwtune.kernels.split_kv import merge_splits, merges_as_dependent, pdl_trigger, split_buffers

LATENT_DTYPES = (torch.float16, torch.bfloat16, torch.float8_e4m3fn)


# --- device side ---------------------------------------------------------------------------------------------
@triton.jit
def _rows(
    qsl_ptr, seq_lens_ptr, num_heads, n_qt, n_ht, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, CAUSAL: tl.constexpr
):
    """This program's rows: (token index into q/out, head, valid, KV position each row may see up to), the KV end
    of the whole tile, its first row's position, the request, and whether it is idle (no query token). Head tiles of one
    (request, query tile) are neighbours on axis 0, so their reads of a KV tile meet in L2."""
    pid = tl.program_id(0)
    ht = pid % n_ht
    req = pid // n_ht // n_qt
    qt = pid // n_ht % n_qt
    q_start = tl.load(qsl_ptr + req)
    q_len = tl.load(qsl_ptr + req + 1) - q_start
    seq = tl.load(seq_lens_ptr + req)
    r = tl.arange(0, BLOCK_H * BLOCK_T)
    tok = qt * BLOCK_T + r // BLOCK_H
    head = ht * BLOCK_H + r % BLOCK_H
    row_ok = (tok < q_len) & (head < num_heads)
    if CAUSAL:
        rows_pos = seq - q_len + tok
        kv_end = tl.minimum(seq, seq - q_len + (qt + 1) * BLOCK_T)
        first_pos = seq - q_len + qt * BLOCK_T
    else:  # every query sees the whole KV
        rows_pos = seq - 1 + tok * 0
        kv_end = seq
        first_pos = seq - 1
    return q_start + tok, head, row_ok, rows_pos, kv_end, first_pos, req, qt * BLOCK_T >= q_len


@triton.jit
def _load_q(
    q_ptr, rows_tok, head, row_ok, stride_qt, stride_qh, LORA: tl.constexpr, ROPE: tl.constexpr, F16: tl.constexpr
):
    """The rows' absorbed queries as two tiles, ``[rows, LORA]`` and ``[rows, ROPE]`` (fp16 for fp8 caches under bf16
    queries: e4m3 converts to fp16 in one instruction per pair, to bf16 only through fp32)."""
    off = rows_tok.to(tl.int64) * stride_qt + head.to(tl.int64) * stride_qh
    q_nope = tl.load(q_ptr + off[:, None] + tl.arange(0, LORA)[None, :], mask=row_ok[:, None], other=0.0)
    q_pe = tl.load(q_ptr + off[:, None] + LORA + tl.arange(0, ROPE)[None, :], mask=row_ok[:, None], other=0.0)
    if F16:
        q_nope = tl.clamp(q_nope.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
        q_pe = tl.clamp(q_pe.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
    return q_nope, q_pe


@triton.jit
def _gather_latent(
    cache_ptr,
    bt_row,
    pos,
    n_ok,
    stride_cb,
    stride_ct,
    LORA: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
):
    """A tile's ckv and kpe rows loaded by address, each position's page from the block table (any page size);
    positions past the context (``MASKED`` tiles) read as zeros."""
    if MASKED:
        blk = tl.load(bt_row + pos // PAGE_SIZE, mask=n_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + pos // PAGE_SIZE).to(tl.int64)
    row = cache_ptr + blk * stride_cb + (pos % PAGE_SIZE).to(tl.int64) * stride_ct
    if MASKED:
        ckv = tl.load(row[:, None] + tl.arange(0, LORA)[None, :], mask=n_ok[:, None], other=0.0)
        kpe = tl.load(row[:, None] + LORA + tl.arange(0, ROPE)[None, :], mask=n_ok[:, None], other=0.0)
    else:
        ckv = tl.load(row[:, None] + tl.arange(0, LORA)[None, :])
        kpe = tl.load(row[:, None] + LORA + tl.arange(0, ROPE)[None, :])
    return ckv, kpe


@triton.jit
def _latent_tile(
    acc,
    m_i,
    l_i,
    q_nope,
    q_pe,
    cache_ptr,
    bt_row,
    j,
    kv_end,
    rows_pos,
    stride_cb,
    stride_ct,
    scale_log2,
    LORA: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
    desc_ckv,
    desc_kpe,
    TMA: tl.constexpr,
):
    """One KV tile of the online softmax (running max ``m_i`` in log2 units): each position's page from the block
    table, its latent row split into ckv and kpe, scores from both, output from ckv. Unmasked tiles (wholly before
    every row's position) load without masks and apply the scale in the exponent's FMA. With ``TMA`` the tile lies
    inside one page and arrives as two descriptor copies (ckv and kpe columns of the cache seen as a
    ``[pages x page, lora + rope]`` matrix); rows past the context may hold anything, so a masked tile's ckv rows
    there are zeroed (their scores are masked below)."""
    pos = j * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = pos < kv_end
    if TMA:
        start = j * BLOCK_N
        row0 = (tl.load(bt_row + start // PAGE_SIZE) * PAGE_SIZE + start % PAGE_SIZE).to(tl.int32)  # < 2**31 rows
        ckv = desc_ckv.load([row0, 0])
        kpe = desc_kpe.load([row0, LORA])
        if MASKED:
            ckv = tl.where(n_ok[:, None], ckv, 0.0)
    else:
        ckv, kpe = _gather_latent(cache_ptr, bt_row, pos, n_ok, stride_cb, stride_ct, LORA, ROPE, PAGE_SIZE, MASKED)
    ckv = ckv.to(q_nope.dtype)
    qk = tl.dot(q_nope, tl.trans(ckv))
    qk = tl.dot(q_pe, tl.trans(kpe.to(q_pe.dtype)), acc=qk)
    if MASKED:
        keep = (pos[None, :] <= rows_pos[:, None]) & n_ok[None, :]
        qk = tl.where(keep, qk * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
        p = tl.exp2(qk * scale_log2 - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(q_nope.dtype), ckv, acc=acc * alpha[:, None])
    return acc, m_new, l_i


@jit_workload_generic
def _mla_decode_kernel(
    q_ptr,
    cache_ptr,
    bt_ptr,
    seq_lens_ptr,
    qsl_ptr,
    out_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    num_heads,
    n_qt,
    n_ht,
    num_splits,
    scale_log2,
    kv_scale,
    stride_qt,
    stride_qh,
    stride_cb,
    stride_ct,
    stride_bt,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_ps,
    stride_pt,
    stride_ph,
    desc_ckv,
    desc_kpe,
    LORA: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr,
    SPLIT: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    F16_DOTS: tl.constexpr,
    TMA: tl.constexpr,
    PDL: tl.constexpr,
):
    rows_tok, head, row_ok, rows_pos, kv_end, first_pos, req, idle = _rows(
        qsl_ptr, seq_lens_ptr, num_heads, n_qt, n_ht, BLOCK_H, BLOCK_T, CAUSAL
    )
    if idle:
        return  # the grid covers the longest query; shorter requests' surplus tiles exit
    q_nope, q_pe = _load_q(q_ptr, rows_tok, head, row_ok, stride_qt, stride_qh, LORA, ROPE, F16_DOTS)
    split = tl.program_id(1)
    if SPLIT:
        t0, t1, full_end = split_tile_range(kv_end, first_pos, split, num_splits, BLOCK_N)
    else:  # the loop starts at a compile-time 0
        t0, t1, full_end = split_tile_range(kv_end, first_pos, 0, 1, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * stride_bt
    acc = tl.zeros([BLOCK_H * BLOCK_T, LORA], tl.float32)
    m_i = tl.full([BLOCK_H * BLOCK_T], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_H * BLOCK_T], tl.float32)
    for j in range(t0, tl.minimum(t1, full_end)):
        acc, m_i, l_i = _latent_tile(
            acc, m_i, l_i, q_nope, q_pe, cache_ptr, bt_row, j, kv_end, rows_pos, stride_cb, stride_ct, scale_log2,
            LORA, ROPE, BLOCK_N, PAGE_SIZE, False, desc_ckv, desc_kpe, TMA,
        )  # fmt: skip
    for j in range(tl.maximum(t0, full_end), t1):
        acc, m_i, l_i = _latent_tile(
            acc, m_i, l_i, q_nope, q_pe, cache_ptr, bt_row, j, kv_end, rows_pos, stride_cb, stride_ct, scale_log2,
            LORA, ROPE, BLOCK_N, PAGE_SIZE, True, desc_ckv, desc_kpe, TMA,
        )  # fmt: skip
    pdl_trigger(PDL)  # the merge kernel may launch now (``split_kv.merges_as_dependent``)
    offs_l = tl.arange(0, LORA)
    store_result(
        acc * kv_scale, m_i, l_i, rows_tok, head, row_ok, offs_l, offs_l < LORA, split, out_ptr, lse_ptr, part_o_ptr,
        part_lse_ptr, stride_ot, stride_oh, stride_lt, stride_lh, stride_ps, stride_pt, stride_ph, LORA, SPLIT,
        WRITE_LSE,
    )  # fmt: skip


# --- host side -----------------------------------------------------------------------------------------------
def _check_args(
    q: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None, kv_lora_rank: int
) -> tuple[int, int, int]:
    """The contract (module docstring) in one place, refused with what was given; returns (tokens, heads, rope)."""
    if q.dim() != 3 or kv_cache.dim() != 3 or q.shape[-1] != kv_cache.shape[-1]:
        raise ValueError(
            f"q must be [tokens, heads, L] and the latent cache [pages, page, L] of the same L; got q "
            f"{tuple(q.shape)}, cache {tuple(kv_cache.shape)}"
        )
    tokens, heads, width = q.shape
    rope = width - kv_lora_rank
    if kv_lora_rank & (kv_lora_rank - 1) or rope < 16 or rope & (rope - 1):
        raise ValueError(
            f"kv_lora_rank and the rope width must be powers of two (rope >= 16); got {kv_lora_rank}, {rope}"
        )
    if q.dtype not in (torch.float16, torch.bfloat16) or kv_cache.dtype not in LATENT_DTYPES:
        raise ValueError(
            f"q must be fp16 or bf16 and the cache fp16, bf16 or fp8 e4m3; got {q.dtype}, {kv_cache.dtype}"
        )
    if kv_cache.dtype != torch.float8_e4m3fn and kv_cache.dtype != q.dtype:
        raise ValueError(f"a 16-bit latent cache must have the query's dtype; got q {q.dtype}, cache {kv_cache.dtype}")
    if out.dtype != q.dtype or tuple(out.shape) != (tokens, heads, kv_lora_rank) or out.stride(-1) != 1:
        raise ValueError(f"out must be {q.dtype} [{tokens}, {heads}, {kv_lora_rank}] with a contiguous last dimension")
    if q.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise ValueError("q and the latent cache must have a contiguous last dimension")
    check_lse(lse, tokens, heads)
    return tokens, heads, rope


def mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    max_query_len: int,
    max_seq_len: int,
    out: torch.Tensor,
    lse: torch.Tensor | None = None,
    softmax_scale: float,
    kv_lora_rank: int = 512,
    kv_scale: float = 1.0,
    causal: bool = True,
    config: MlaConfig | None = None,
    workspace: torch.Tensor | None = None,
) -> MlaConfig:
    """Absorbed MLA attention of ``q`` [tokens, heads, lora + rope] over the paged latent cache ``kv_cache``
    [pages, page, lora + rope] into ``out`` [tokens, heads, lora] (and ``lse`` [tokens, heads], float32, natural log).
    Host integers only on the launch path; returns the config it ran (``default_mla_config`` unless given)."""
    check_runnable(q, kv_cache)
    tokens, heads, rope = _check_args(q, kv_cache, out, lse, kv_lora_rank)
    batch = block_table.shape[0]
    if config is None:
        config = default_mla_config(
            num_heads=heads, max_query_len=max_query_len, batch=batch, max_seq_len=max_seq_len,
            sms=num_sms(q.device), kv_bytes=kv_cache.element_size(),
        )  # fmt: skip
    if batch == 0 or tokens == 0:
        return config
    splits = config.num_splits
    part_o, part_lse = (
        (out, out) if splits == 1 else _split_scratch(workspace, config, tokens, heads, kv_lora_rank, q)[:2]
    )
    n_qt, n_ht = cdiv(max_query_len, config.block_t), cdiv(heads, config.block_h)
    pdl = splits > 1 and merges_as_dependent(q.device, max_query_len)
    lse_arg = lse if lse is not None else out
    scales = (float(softmax_scale) * float(kv_scale) * LOG2E, float(kv_scale))
    strides = (q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1), block_table.stride(0))
    strides += (out.stride(0), out.stride(1), lse_arg.stride(0), lse_arg.stride(1) if lse is not None else 0)
    strides += (part_lse.stride(0), part_lse.stride(1), part_lse.stride(2)) if splits > 1 else (0, 0, 0)
    descs = _latent_descriptors(q, kv_cache, config, kv_lora_rank) if config.tma else (kv_cache, kv_cache)
    _mla_decode_kernel[(batch * n_qt * n_ht, splits)](
        q, kv_cache, block_table, seq_lens, query_start_loc, out, lse_arg, part_o, part_lse,
        heads, n_qt, n_ht, splits, *scales, *strides, *descs,
        LORA=kv_lora_rank, ROPE=rope, BLOCK_H=config.block_h, BLOCK_T=config.block_t, BLOCK_N=config.block_n,
        PAGE_SIZE=kv_cache.shape[1], CAUSAL=causal, SPLIT=splits > 1, WRITE_LSE=lse is not None,
        F16_DOTS=kv_cache.dtype == torch.float8_e4m3fn and q.dtype == torch.bfloat16, TMA=config.tma,
        PDL=pdl, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if splits > 1:
        merge_splits(part_o, part_lse, out, lse, query_start_loc, batch, pdl=pdl)
    return config


def tma_unsupported(q: torch.Tensor, kv_cache: torch.Tensor, block_n: int) -> str | None:
    """Why latent tiles of ``block_n`` positions cannot be TMA copies of this cache (None: they can)."""
    no_tma = tma_device_unsupported(q)
    if no_tma is not None:
        return no_tma
    if kv_cache.dtype != q.dtype:
        return f"TMA tiles go to the dots as they arrive: the cache must have the query's dtype, not {kv_cache.dtype}"
    pages, page, width = kv_cache.shape
    if page % block_n:
        return f"a {block_n}-position tile must lie inside one page of {page}: use block_n dividing the page"
    if kv_cache.stride(0) != page * kv_cache.stride(1) or (kv_cache.stride(1) * kv_cache.element_size()) % 16:
        return "TMA needs whole pages back to back and a row stride of a multiple of 16 bytes"
    if kv_cache.data_ptr() % 16 or pages * page >= 2**31:
        return "TMA needs a 16-byte aligned cache of fewer than 2**31 rows"
    return None


def tma_page(q: torch.Tensor, kv_cache: torch.Tensor) -> int:
    """``mla_config_space``'s ``tma_page`` for this cache: its page size where the space's TMA tiles can run, else 0."""
    return kv_cache.shape[1] if tma_unsupported(q, kv_cache, _TMA_BLOCK_N) is None else 0


def _latent_descriptors(q: torch.Tensor, kv_cache: torch.Tensor, config: MlaConfig, lora: int) -> tuple[object, object]:
    """Host TMA descriptors of a tile's ckv and kpe columns, or a ValueError saying why there can be none."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    reason = tma_unsupported(q, kv_cache, config.block_n)
    if reason is not None:
        raise ValueError(f"MlaConfig.tma is not possible here: {reason}")
    pages, page, width = kv_cache.shape
    shape, strides = [pages * page, width], [kv_cache.stride(1), 1]
    return (
        TensorDescriptor(kv_cache, shape, strides, [config.block_n, lora]),
        TensorDescriptor(kv_cache, shape, strides, [config.block_n, width - lora]),
    )


def _split_scratch(
    workspace: torch.Tensor | None, config: MlaConfig, tokens: int, heads: int, lora: int, q: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The split-KV partials ``[splits, tokens, heads, lora]`` (float32, or the query's dtype with
    ``config.half_partials``) and ``[splits, tokens, heads]`` in ``workspace`` (allocated when none is given: sizes
    from host integers)."""
    return split_buffers(
        workspace, splits=config.num_splits, num_tokens=tokens, num_heads=heads, head_size=lora, device=q.device,
        partial_dtype=q.dtype if config.half_partials else torch.float32,
    )  # fmt: skip


__all__ = [
    "MlaConfig",
    "default_mla_config",
    "mla_config_space",
    "mla_decode",
    "tma_page",
    "tma_unsupported",
    "workspace_size",
]
