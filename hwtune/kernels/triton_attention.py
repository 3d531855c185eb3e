"""TRITON_ATTN: hwtune's paged attention in Triton (decode, prefill, mixed batches, speculative decode).

One kernel serves every phase. A program owns (query tile, KV head, KV split): its query rows are a
request's query tokens x the GQA group of that KV head, so each KV tile is loaded once per KV head and fed
to one ``tl.dot`` for all of them (decode reads every page once per KV head). Query token ``i`` of request
``r`` sits at position ``seq_lens[r] - query_len[r] + i`` and sees KV positions up to it (causal within the
new tokens, whole cached prefix). The KV loop runs in two parts: tiles wholly before the tile's first query
position (no mask: straight 16-byte loads), then the diagonal / tail tiles (masked). A prefill-style launch reads
the block table for the first part in chunks outside its pipelined loop (``page_chunks.py``), so the compiler
prefetches K/V tiles a stage deeper.

With ``num_splits > 1`` (flash-decoding) each split writes a normalised partial output and its LSE to the
workspace and they are merged by LSE: in decode-style launches of a few splits by the last split of each tile to
finish, inside this kernel (``split_kv.merges_in_kernel``), otherwise by a small second kernel; with one split the
kernel writes ``out`` and ``lse`` directly. The LSE is the natural log of the softmax denominator of
``softmax_scale * q.k`` (float32), so attention over two disjoint KV sets merges exactly (DCP).

KV caches: ``k_cache``/``v_cache`` are 4-D views with any strides (NHD ``[blocks, page, kv_heads, D]`` or
HND ``[blocks, kv_heads, page, D]``) whose last dimension is contiguous; fp16/bf16, or fp8 e4m3 with
per-tensor ``k_scale``/``v_scale`` (folded into the softmax scale and the output). With fp8 KV and bf16
queries both dots run in fp16 (the hardware converts e4m3 to fp16 directly, to bf16 only through fp32):
bf16 query values are exact in fp16 from 2^-14 to 65504 (smaller ones lose bits, negligibly; larger
ones are clamped to +-65504). Head size 96 runs as
128 with masked lanes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hwtune.kernels._common import (
    LOG2E,
    check_query_io,
    check_runnable,
    jit_workload_generic,
    l2_bytes,
    num_sms,
    plan_launch,
    program_coords,
    query_tile,
    split_tile_range,
    store_result,
)
from hwtune.kernels._tma import choose_kv_loads, kv_descriptors, kv_matrix, tma_unsupported
from hwtune.kernels.configs import (
    HEAD_SIZES,
    TritonAttnConfig,
    config_space,
    default_config,
    is_decode_shape,
    next_pow2,
    workspace_size,
)
from hwtune.kernels.page_chunks import bt_chunk, chunk_pages, page_chunk
from hwtune.kernels.split_kv import (
    merge_if_last,
    merge_splits,
    merges_as_dependent,
    merges_in_kernel,
    pdl_trigger,
    split_buffers,
)

KV_DTYPES = (torch.float16, torch.bfloat16, torch.float8_e4m3fn)


@triton.jit
def _kv_tile(
    acc,
    m_i,
    l_i,
    q,
    k_base,
    v_base,
    bt_row,
    j,
    kv_end,
    rows_pos,
    offs_n,
    offs_d,
    d_ok,
    k_in_page,
    v_in_page,
    stride_kb,
    stride_kt,
    stride_vb,
    stride_vt,
    scale_log2,
    desc_k,
    desc_v,
    tma_rows_per_block,
    tma_row0,
    tma_col,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
    D_PADDED: tl.constexpr,
    TMA: tl.constexpr,
    pages,
    PAGES_GIVEN: tl.constexpr,
):
    """One KV tile of the online softmax (running max ``m_i`` in log2 units).

    The scale is applied in one FMA (``qk * scale - m``) rather than scaling the score tile first: prefill
    is bound by the work per score element, not the loads. ``k_in_page``/``v_in_page`` are the in-page
    offsets of the tile's positions, used when tiles start on page boundaries (``BLOCK_N % PAGE_SIZE ==
    0``); otherwise (a page of 48 or 128 tokens, say) they are computed per tile. With ``TMA`` the tile
    lies inside one page and arrives as one descriptor copy (``_tma.py``): rows past the context may hold
    anything, so the masked tiles zero V there (K's scores are masked). With ``PAGES_GIVEN`` the tile's block-table
    entries come from the caller (``page_chunks.chunk_pages``: its page where it lies inside one, else each
    position's), not from a load here."""
    pos = j * BLOCK_N + offs_n
    if TMA:
        start = j * BLOCK_N
        page = pages if PAGES_GIVEN else tl.load(bt_row + start // PAGE_SIZE)
        row = page * tma_rows_per_block + tma_row0 + start % PAGE_SIZE
        k = desc_k.load([row, tma_col])
        v = desc_v.load([row, tma_col])
        if MASKED:
            n_ok = pos < kv_end
            v = tl.where(n_ok[:, None], v, 0.0).to(v.dtype)
    elif BLOCK_N % PAGE_SIZE == 0:
        page_idx = j * (BLOCK_N // PAGE_SIZE) + offs_n // PAGE_SIZE
    else:
        page_idx = pos // PAGE_SIZE
        k_in_page = (pos % PAGE_SIZE).to(tl.int64) * stride_kt
        v_in_page = (pos % PAGE_SIZE).to(tl.int64) * stride_vt
    if not TMA:
        if PAGES_GIVEN:  # unmasked tiles only
            blk = pages.to(tl.int64)
        elif MASKED:
            n_ok = pos < kv_end
            blk = tl.load(bt_row + page_idx, mask=n_ok, other=0).to(tl.int64)
        else:
            blk = tl.load(bt_row + page_idx).to(tl.int64)
        k_off = blk * stride_kb + k_in_page
        v_off = blk * stride_vb + v_in_page
        if D_PADDED:  # head 96 as 128: lanes past the head masked
            if MASKED:
                ld_mask = n_ok[:, None] & d_ok[None, :]
            else:
                ld_mask = (pos >= 0)[:, None] & d_ok[None, :]
            k = tl.load(k_base + k_off[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
            v = tl.load(v_base + v_off[:, None] + offs_d[None, :], mask=ld_mask, other=0.0)
        elif MASKED:  # a row mask only, so the loads stay 16-byte vectors
            k = tl.load(k_base + k_off[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
            v = tl.load(v_base + v_off[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
        else:
            k = tl.load(k_base + k_off[:, None] + offs_d[None, :])
            v = tl.load(v_base + v_off[:, None] + offs_d[None, :])
    qk = tl.dot(q, tl.trans(k.to(q.dtype)))
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
    acc = tl.dot(p.to(q.dtype), v.to(q.dtype), acc=acc * alpha[:, None])
    return acc, m_new, l_i


@jit_workload_generic
def _paged_attn_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    seq_lens_ptr,
    qsl_ptr,
    out_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    counters_ptr,
    desc_k,
    desc_v,
    batch,
    num_kv_heads,
    num_splits,
    scale_log2,
    v_scale,
    tma_rows_per_block,
    tma_rows_per_head,
    tma_cols_per_head,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_bt,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_ps,
    stride_pt,
    stride_ph,
    HEAD_D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    ONE_PER_REQ: tl.constexpr,
    HEADS_FAST: tl.constexpr,
    SPLIT: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    F16_DOTS: tl.constexpr,
    TMA: tl.constexpr,
    MERGE_HERE: tl.constexpr,
    BT_CHUNK: tl.constexpr,
    BT_PAGES: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_q, kv_head, split = program_coords(num_kv_heads, HEADS_FAST)
    tiles_left, req, rows_tok, rows_pos, head, row_ok, first_pos, kv_end = query_tile(
        pid_q, kv_head, qsl_ptr, seq_lens_ptr, batch, BLOCK_M, BLOCK_Q, GROUP, ONE_PER_REQ
    )
    if tiles_left <= 0:
        return
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_D
    q_off = rows_tok.to(tl.int64) * stride_qt + head * stride_qh
    if BLOCK_D != HEAD_D:
        q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if F16_DOTS:  # fp8 KV with bf16 queries: e4m3 -> fp16 is one instruction per pair, e4m3 -> bf16 is not
        q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)

    if SPLIT:
        t0, t1, full_end = split_tile_range(kv_end, first_pos, split, num_splits, BLOCK_N)
    else:  # the loop starts at a compile-time 0
        t0, t1, full_end = split_tile_range(kv_end, first_pos, 0, 1, BLOCK_N)

    bt_row = bt_ptr + req.to(tl.int64) * stride_bt
    k_base = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + kv_head.to(tl.int64) * stride_vh
    offs_n = tl.arange(0, BLOCK_N)
    # in-page offsets of a tile's positions: the same for every tile when tiles start on page boundaries
    k_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_kt
    v_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_vt
    tma_row0 = kv_head * tma_rows_per_head
    tma_col = kv_head * tma_cols_per_head
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    full_stop = tl.minimum(t1, full_end)
    if BT_CHUNK > 0:  # the block table read a chunk of tiles at a time, outside the pipelined loop
        for c0 in range(t0, full_stop, BT_CHUNK):
            first, chunk = page_chunk(bt_row, c0, kv_end, BLOCK_N, PAGE_SIZE, BT_PAGES)
            for j in range(c0, tl.minimum(c0 + BT_CHUNK, full_stop)):
                acc, m_i, l_i = _kv_tile(
                    acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d, d_ok, k_in_page,
                    v_in_page, stride_kb, stride_kt, stride_vb, stride_vt, scale_log2, desc_k, desc_v,
                    tma_rows_per_block, tma_row0, tma_col, BLOCK_N, PAGE_SIZE, False, BLOCK_D != HEAD_D, TMA,
                    chunk_pages(chunk, first, j, BLOCK_N, PAGE_SIZE, BT_PAGES), True,
                )  # fmt: skip
    else:
        for j in range(t0, full_stop):
            acc, m_i, l_i = _kv_tile(
                acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d, d_ok, k_in_page,
                v_in_page, stride_kb, stride_kt, stride_vb, stride_vt, scale_log2, desc_k, desc_v, tma_rows_per_block,
                tma_row0, tma_col, BLOCK_N, PAGE_SIZE, False, BLOCK_D != HEAD_D, TMA, 0, False,
            )  # fmt: skip
    for j in range(tl.maximum(t0, full_end), t1):
        acc, m_i, l_i = _kv_tile(
            acc,
            m_i,
            l_i,
            q,
            k_base,
            v_base,
            bt_row,
            j,
            kv_end,
            rows_pos,
            offs_n,
            offs_d,
            d_ok,
            k_in_page,
            v_in_page,
            stride_kb,
            stride_kt,
            stride_vb,
            stride_vt,
            scale_log2,
            desc_k,
            desc_v,
            tma_rows_per_block,
            tma_row0,
            tma_col,
            BLOCK_N,
            PAGE_SIZE,
            True,
            BLOCK_D != HEAD_D,
            TMA,
            0,
            False,
        )
    pdl_trigger(PDL)  # the merge kernel may launch now (``split_kv.merges_as_dependent``)
    acc = acc * v_scale
    store_result(
        acc,
        m_i,
        l_i,
        rows_tok,
        head,
        row_ok,
        offs_d,
        d_ok,
        split,
        out_ptr,
        lse_ptr,
        part_o_ptr,
        part_lse_ptr,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        stride_ps,
        stride_pt,
        stride_ph,
        HEAD_D,
        SPLIT,
        WRITE_LSE,
    )
    if MERGE_HERE:
        merge_if_last(
            counters_ptr + pid_q * num_kv_heads + kv_head,
            num_splits,
            part_o_ptr,
            part_lse_ptr,
            out_ptr,
            lse_ptr,
            rows_tok,
            head,
            row_ok,
            offs_d,
            d_ok,
            stride_ps,
            stride_pt,
            stride_ph,
            stride_ot,
            stride_oh,
            stride_lt,
            stride_lh,
            HEAD_D,
            BLOCK_M,
            BLOCK_D,
            WRITE_LSE,
        )


def _kv_strides(cache: torch.Tensor, kv_layout: str) -> tuple[int, int, int, int]:
    """(block, position-in-page, kv-head) strides and the page size, for either layout."""
    if cache.dim() != 4 or cache.stride(-1) != 1:
        raise ValueError(
            f"a KV cache view must be 4-D with a contiguous last (head) dimension; got shape "
            f"{tuple(cache.shape)} strides {cache.stride()}"
        )
    if kv_layout == "NHD":
        return cache.stride(0), cache.stride(1), cache.stride(2), cache.shape[1]
    if kv_layout == "HND":
        return cache.stride(0), cache.stride(2), cache.stride(1), cache.shape[2]
    raise ValueError(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    max_query_len: int,
    max_seq_len: int,
    out: torch.Tensor,
    lse: torch.Tensor | None = None,
    softmax_scale: float,
    kv_layout: str = "NHD",
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    config: TritonAttnConfig | None = None,
    workspace: torch.Tensor | None = None,
    kv_loads: str = "auto",
) -> None:
    """Paged attention of ``q`` [tokens, heads, D] over the cache into ``out`` (and ``lse`` [tokens, heads]
    float32, natural log). Host integers only on the launch path: no device reads, graph-capturable.

    ``kv_loads``: how KV tiles reach the SM. ``auto`` uses TMA copies for prefill-style launches where
    a tile lies inside one page on Hopper or later (``_tma.py``), gathers otherwise; ``tma`` requires TMA
    (ValueError saying why it cannot); ``gather`` never uses it.

    ``workspace``: the split-KV scratch (``workspace_size`` elements), allocated with ``torch.zeros`` and used by one
    stream at a time: it holds the in-kernel merge's arrival counters, which must start at zero and which every launch
    leaves at zero. Without one, a scratch is allocated and its counters zeroed on every call."""
    check_runnable(q, k_cache, v_cache)
    num_tokens, num_heads, head_size = check_query_io(q, out, lse)
    ks_b, ks_t, ks_h, page_size = _kv_strides(k_cache, kv_layout)
    vs_b, vs_t, vs_h, v_page = _kv_strides(v_cache, kv_layout)
    num_kv_heads = k_cache.shape[2] if kv_layout == "NHD" else k_cache.shape[1]
    if head_size not in HEAD_SIZES or k_cache.shape[-1] != head_size or v_cache.shape[-1] != head_size:
        raise ValueError(
            f"head size must be one of {HEAD_SIZES} and equal in q, K and V; got q {head_size}, "
            f"K {k_cache.shape[-1]}, V {v_cache.shape[-1]}"
        )
    if page_size % 16 or not 16 <= page_size <= 128 or v_page != page_size:
        raise ValueError(f"page size must be a multiple of 16 in 16..128 (and equal for K and V); got {page_size}")
    if num_heads % num_kv_heads:
        raise ValueError(f"query heads ({num_heads}) must be a multiple of KV heads ({num_kv_heads})")
    if k_cache.dtype not in KV_DTYPES or v_cache.dtype != k_cache.dtype:
        raise ValueError(f"KV cache dtype must be float16, bfloat16 or float8_e4m3fn; got {k_cache.dtype}")
    batch = block_table.shape[0]
    if batch == 0 or num_tokens == 0:
        return  # nothing to attend (host ints: no sync)
    group = num_heads // num_kv_heads
    k_mat = kv_matrix(
        k_cache, stride_b=ks_b, stride_t=ks_t, stride_h=ks_h, page_size=page_size, num_kv_heads=num_kv_heads
    )
    v_mat = kv_matrix(
        v_cache, stride_b=vs_b, stride_t=vs_t, stride_h=vs_h, page_size=page_size, num_kv_heads=num_kv_heads
    )
    tma_reason = tma_unsupported(q, k_cache, v_cache, k_mat, v_mat)
    if config is None:
        config = default_config(
            phase="decode" if max_query_len <= 1 else "mixed",
            batch=batch,
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            head_size=head_size,
            gqa_group=group,
            num_sms=num_sms(q.device),
            num_kv_heads=num_kv_heads,
            kv_cache_bytes=k_cache.element_size(),
        )
    plan = plan_launch(
        config,
        num_tokens=num_tokens,
        batch=batch,
        max_query_len=max_query_len,
        head_size=head_size,
        gqa_group=group,
        l2=l2_bytes(q.device),
        kv_bytes_per_request=2 * max_seq_len * num_kv_heads * head_size * k_cache.element_size(),
    )
    use_tma = choose_kv_loads(
        kv_loads,
        unsupported=tma_reason,
        page_size=page_size,
        block_n=plan.block_n,
        prefill_style=not is_decode_shape(max_query_len),
    )
    if use_tma:
        desc_k, desc_v = kv_descriptors(k_cache, v_cache, k_mat, v_mat, plan.block_n)
        tma_geometry = (k_mat.rows_per_block, k_mat.rows_per_head, k_mat.cols_per_head)
    else:
        desc_k, desc_v, tma_geometry = k_cache, v_cache, (0, 0, 0)  # unused by the gather kernel
    chunk_tiles, chunk_entries = bt_chunk(
        prefill_style=not is_decode_shape(max_query_len),
        page_size=page_size,
        block_n=plan.block_n,
        tma=use_tma,
        num_stages=plan.num_stages,
    )
    splits = plan.num_splits
    merge_here = splits > 1 and merges_in_kernel(plan, max_query_len, num_kv_heads)
    pdl = splits > 1 and not merge_here and merges_as_dependent(q.device, max_query_len)
    if splits > 1:
        part_o, part_lse, counters = split_buffers(
            workspace, splits=splits, num_tokens=num_tokens, num_heads=num_heads, head_size=head_size, device=q.device
        )
    else:
        part_o = part_lse = counters = out  # unused by the unsplit kernel
    lse_arg = lse if lse is not None else out
    pl_strides = (part_lse.stride(0), part_lse.stride(1), part_lse.stride(2)) if splits > 1 else (0, 0, 0)
    _paged_attn_kernel[plan.grid(num_kv_heads)](
        q,
        k_cache,
        v_cache,
        block_table,
        seq_lens,
        query_start_loc,
        out,
        lse_arg,
        part_o,
        part_lse,
        counters,
        desc_k,
        desc_v,
        batch,
        num_kv_heads,
        splits,
        float(softmax_scale) * float(k_scale) * LOG2E,
        float(v_scale),
        *tma_geometry,
        q.stride(0),
        q.stride(1),
        ks_b,
        ks_t,
        ks_h,
        vs_b,
        vs_t,
        vs_h,
        block_table.stride(0),
        out.stride(0),
        out.stride(1),
        lse_arg.stride(0),
        lse_arg.stride(1) if lse is not None else 0,
        *pl_strides,
        HEAD_D=head_size,
        BLOCK_D=next_pow2(head_size),
        BLOCK_M=plan.block_m,
        BLOCK_Q=plan.block_q,
        BLOCK_N=plan.block_n,
        GROUP=group,
        PAGE_SIZE=page_size,
        ONE_PER_REQ=plan.one_per_req,
        HEADS_FAST=plan.heads_fast,
        SPLIT=splits > 1,
        WRITE_LSE=lse is not None,
        F16_DOTS=k_cache.dtype == torch.float8_e4m3fn and q.dtype == torch.bfloat16,
        TMA=use_tma,
        MERGE_HERE=merge_here,
        BT_CHUNK=chunk_tiles,
        BT_PAGES=chunk_entries,
        PDL=pdl,
        num_warps=plan.num_warps,
        num_stages=plan.num_stages,
    )
    if splits > 1 and not merge_here:
        merge_splits(part_o, part_lse, out, lse, query_start_loc, batch, pdl=pdl)


__all__ = ["TritonAttnConfig", "config_space", "default_config", "paged_attention", "workspace_size"]
