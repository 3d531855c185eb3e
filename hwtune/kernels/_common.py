"""Pieces shared by TRITON_ATTN and TURBOQUANT: where a program's query rows are, which KV tiles its split
covers, how a program stores its result (or its split's partial, merged by ``split_kv``), and the host-side launch
plan.

WHY one scheme for every phase: a batch may mix prefill chunks and decode requests, and the metadata
(``seq_lens``, ``query_start_loc``, ``block_table``) lives on the device. Each program finds its own request
from ``query_start_loc`` (a binary search over "query tiles so far") instead of the host routing requests,
so a call never reads device memory on the host (no sync, CUDA-graph capturable) and the grid depends only
on host integers (number of tokens, batch size, splits).

Query rows of a tile are (query token, query head of one GQA group) pairs, row ``r`` being token
``r // GROUP`` and head ``kv_head * GROUP + r % GROUP``: one KV tile feeds every head that shares it.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hwtune.kernels.configs import (
    TritonAttnConfig,
    cdiv,
    decode_block_m,
    is_decode_shape,
    next_pow2,
    prefill_block_m,
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

#: Integer kernel arguments that change with the workload (batch, split count, query tiles, the block table's row
#: stride and the split scratch's per-split stride) and that Triton would otherwise specialise on (``== 1``, divisible
#: by 16), compiling every config once per combination. Left generic, a config compiles once per constexpr set and
#: serves every later workload: on an H100 (2026-11-27) the ``tuned`` search of the paged-attention kernel took 0.4-2.4
#: s per decode workload instead of 1-24 s, the chosen configs within 2 % of the specialised kernels' times
#: (``benchmarks/experiments/triton_specialization.py``; the MLA kernel's times were not compared).
WORKLOAD_INTS = ["batch", "num_splits", "n_qt", "stride_bt", "stride_ps", "num_rows"]


def jit_workload_generic(fn):  # noqa: ANN001, ANN201 - a kernel function in, a Triton JIT function out
    """``triton.jit`` that leaves the kernel's workload integers (``WORKLOAD_INTS``) unspecialised."""
    params = inspect.signature(fn).parameters
    return triton.jit(do_not_specialize=[n for n in WORKLOAD_INTS if n in params])(fn)


# --- device-side helpers -------------------------------------------------------------------------------------
@triton.jit
def locate_qblock(pid, qsl_ptr, batch, BLOCK_Q: tl.constexpr, ONE_PER_REQ: tl.constexpr):
    """(request, query tile within it) of program ``pid``. Request r owns programs
    ``qsl[r] // BLOCK_Q + r`` up to the next request's start: always at least its ``cdiv(len, BLOCK_Q)``
    tiles, so a grid of ``num_tokens // BLOCK_Q + batch`` covers any batch (surplus programs exit)."""
    if ONE_PER_REQ:
        req = pid
        local = pid * 0
    else:
        lo = pid * 0
        hi = lo + batch
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if tl.load(qsl_ptr + mid) // BLOCK_Q + mid <= pid:
                lo = mid
            else:
                hi = mid
        req = lo
        local = pid - (tl.load(qsl_ptr + lo) // BLOCK_Q + lo)
    return req, local


@triton.jit
def program_coords(num_kv_heads, HEADS_FAST: tl.constexpr):
    """(query-tile program, KV head, split) of this program.

    With ``HEADS_FAST`` axis 0 is ``query tile x KV heads + KV head``: the hardware dispatches programs in
    axis-0 order, so every KV head's copy of the longest causal tile starts first and the short tiles fill
    the tail. Otherwise the programs running at once share one KV head, whose KV then stays in L2. The
    launch plan picks heads-fast only where a request's whole KV fits in half the L2 (see
    ``plan_launch``)."""
    if HEADS_FAST:
        pid_q = tl.program_id(0) // num_kv_heads
        kv_head = tl.program_id(0) % num_kv_heads
    else:
        pid_q = tl.program_id(0)
        kv_head = tl.program_id(1)
    return pid_q, kv_head, tl.program_id(2)


@triton.jit
def query_tile(
    pid_q,
    kv_head,
    qsl_ptr,
    seq_lens_ptr,
    batch,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    GROUP: tl.constexpr,
    ONE_PER_REQ: tl.constexpr,
):
    """The query rows of program ``pid_q``, shared by both kernels.

    Returns ``(tiles_left, req, rows_tok, rows_pos, rows_head, row_ok, first_pos, kv_end)``: the program has
    work only when ``tiles_left > 0`` (the grid is a bound, surplus programs exit); row ``r`` is query token
    ``rows_tok`` (index into q/out) at KV position ``rows_pos``, head ``rows_head``; the tile's first position
    and the end of the KV it may see (causal). Requests' last (longest) tiles get the lowest programs."""
    req, local = locate_qblock(pid_q, qsl_ptr, batch, BLOCK_Q, ONE_PER_REQ)
    q_start = tl.load(qsl_ptr + req)
    q_len = tl.load(qsl_ptr + req + 1) - q_start
    n_qtiles = tl.cdiv(q_len, BLOCK_Q)
    qtile = n_qtiles - 1 - local
    ctx = tl.load(seq_lens_ptr + req) - q_len  # cached prefix before the new tokens
    rows = tl.arange(0, BLOCK_M)
    tok = qtile * BLOCK_Q + rows // GROUP
    row_ok = (rows // GROUP < BLOCK_Q) & (tok < q_len)
    first_pos = ctx + qtile * BLOCK_Q
    kv_end = tl.minimum(ctx + q_len, first_pos + BLOCK_Q)
    return (n_qtiles - local, req, q_start + tok, ctx + tok, kv_head * GROUP + rows % GROUP, row_ok, first_pos, kv_end)


@triton.jit
def split_tile_range(kv_end, first_pos, split, num_splits, BLOCK_N: tl.constexpr):
    """KV tiles [t0, t1) of this split, and ``full_end``: tiles below it need no causal or length mask
    (every position there is <= the first query row's position, hence < kv_end)."""
    n_tiles = tl.cdiv(kv_end, BLOCK_N)
    per_split = tl.cdiv(n_tiles, num_splits)
    t0 = split * per_split
    t1 = tl.minimum(t0 + per_split, n_tiles)
    full_end = (first_pos + 1) // BLOCK_N
    return t0, t1, full_end


@triton.jit
def store_result(
    acc,
    m_i,
    l_i,
    rows_tok,
    rows_head,
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
    HEAD_D: tl.constexpr,
    SPLIT: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Normalise and store. ``m_i`` is the running max in log2 units; rows that saw no KV (possible in a
    split, never overall) get output 0 and LSE -inf so the merge weighs them zero."""
    has = l_i > 0.0
    inv_l = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)
    o = acc * inv_l[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    mask = row_ok[:, None] & d_ok[None, :]
    if SPLIT:
        base = split.to(tl.int64) * stride_ps + rows_tok.to(tl.int64) * stride_pt + rows_head * stride_ph
        tl.store(part_o_ptr + base[:, None] * HEAD_D + offs_d[None, :], o.to(part_o_ptr.dtype.element_ty), mask=mask)
        tl.store(part_lse_ptr + base, lse, mask=row_ok)
    else:
        o_off = rows_tok.to(tl.int64) * stride_ot + rows_head * stride_oh
        tl.store(out_ptr + o_off[:, None] + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=mask)
        if WRITE_LSE:
            tl.store(lse_ptr + rows_tok.to(tl.int64) * stride_lt + rows_head * stride_lh, lse, mask=row_ok)


# --- host-side plan ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchPlan:
    """Tile sizes, splits and grid of one launch, from host integers only (so a call never syncs and can be captured
    in a CUDA graph); built by ``plan_launch``."""

    block_m: int
    block_q: int
    block_n: int
    num_splits: int
    grid0: int
    one_per_req: bool
    num_warps: int
    num_stages: int
    heads_fast: bool = False

    def grid(self, num_kv_heads: int) -> tuple[int, int, int]:
        """The launch grid (query-tile programs, KV heads, splits); heads-fast folds the KV heads into axis 0 so the
        hardware's axis-0 dispatch order interleaves heads (see ``program_coords``)."""
        if self.heads_fast:
            return (self.grid0 * num_kv_heads, 1, self.num_splits)
        return (self.grid0, num_kv_heads, self.num_splits)


@functools.lru_cache(maxsize=8)
def l2_bytes(device: torch.device) -> int:
    """L2 size of ``device`` (host query, cached; no sync); 50 MiB (an H100's) for the interpreter."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or 50 * 2**20
    return 50 * 2**20


@functools.lru_cache(maxsize=8)
def num_sms(device: torch.device) -> int:
    """SM count of ``device`` (host query, cached; no sync). The interpreter (CPU tensors) gets 4 so the
    heuristics still exercise splits on small test shapes."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4


def interpreting() -> bool:
    """Whether Triton's CPU interpreter is on (TRITON_INTERPRET), the only way the kernels accept CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_runnable(*tensors: torch.Tensor) -> None:
    """Refuse CPU tensors unless Triton's interpreter is on, with the way out in the message, instead of Triton's own
    obscure failure."""
    for t in tensors:
        if t.device.type != "cuda" and not interpreting():
            raise RuntimeError(
                f"hwtune's Triton attention kernels run on CUDA tensors; got a tensor on {t.device}. "
                "Move the inputs to a GPU, or set TRITON_INTERPRET=1 before importing triton to run them "
                "on the CPU with Triton's interpreter (slow; for tests)."
            )


def check_query_io(q: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None) -> tuple[int, int, int]:
    """The query/output/LSE contract both kernels share; returns (tokens, heads, head size).

    WHY here: a wrong dtype or a strided last dimension would make the kernels read garbage rather than fail,
    so both entry points refuse them with the same words."""
    if q.dim() != 3:
        raise ValueError(f"q must be [tokens, heads, head_size]; got shape {tuple(q.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16) or out.dtype != q.dtype or out.shape != q.shape:
        raise ValueError(
            f"q and out must be float16 or bfloat16 of the same shape; got q {q.dtype} "
            f"{tuple(q.shape)}, out {out.dtype} {tuple(out.shape)}"
        )
    if q.stride(-1) != 1 or out.stride(-1) != 1:
        raise ValueError("q and out must have a contiguous last dimension")
    num_tokens, num_heads, head_size = q.shape
    check_lse(lse, num_tokens, num_heads)
    return num_tokens, num_heads, head_size


def check_lse(lse: torch.Tensor | None, tokens: int, heads: int) -> None:
    """An LSE buffer, where given, is float32 [tokens, heads] (natural log), as every kernel here writes it."""
    if lse is not None and (lse.dtype != torch.float32 or tuple(lse.shape) != (tokens, heads)):
        raise ValueError(f"lse must be float32 [{tokens}, {heads}]; got {lse.dtype} {tuple(lse.shape)}")


def plan_launch(
    config: TritonAttnConfig,
    *,
    num_tokens: int,
    batch: int,
    max_query_len: int,
    head_size: int,
    gqa_group: int,
    kv_bytes_per_request: int = 0,
    l2: int = 0,
) -> LaunchPlan:
    """Tile geometry and grid from host integers only.

    ``kv_bytes_per_request`` (all KV heads, K and V, at the longest context) against ``l2`` chooses the
    program order of prefill-style launches (decode-style launches, speculative decode included, keep the
    3-D grid: their programs do equal work). On the H100 (2026-11-21, benchmarks/results/experiments/
    prefill_variants_h100_2026-11-21.txt and prefill_order_h100_2026-11-21.txt) heads-fast was 1.5-2 %
    faster where a request's KV is 16 MB (4096-token prefill, 1 or 4 requests), even to 1 % faster at 8192
    tokens from empty (32 MB), and slower for 4096 tokens on a 4096 prefix (32 MB, 3-5 %) and at 16384 tokens
    (64 MB, 2.4 %): the programs running at once then read 8 heads' KV and overflow L2. So heads-fast only
    when the KV fits in half the L2 (conservative at 32 MB)."""
    if is_decode_shape(max_query_len):
        block_m = config.block_m or decode_block_m(max_query_len, gqa_group)
    else:
        block_m = config.block_m or prefill_block_m(head_size, gqa_group)
    block_m = max(block_m, next_pow2(gqa_group), 16)
    block_q = block_m // gqa_group
    one_per_req = block_q >= max(1, max_query_len)
    grid0 = batch if one_per_req else num_tokens // block_q + batch
    heads_fast = not is_decode_shape(max_query_len) and 0 < kv_bytes_per_request <= l2 // 2
    return LaunchPlan(
        block_m=block_m,
        block_q=block_q,
        block_n=config.block_n,
        num_splits=config.num_splits or 1,
        grid0=max(1, grid0),
        one_per_req=one_per_req,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        heads_fast=heads_fast,
    )


__all__ = [
    "LN2",
    "LOG2E",
    "LaunchPlan",
    "cdiv",
    "check_query_io",
    "check_runnable",
    "interpreting",
    "l2_bytes",
    "locate_qblock",
    "num_sms",
    "plan_launch",
    "program_coords",
    "query_tile",
    "split_tile_range",
    "store_result",
]
