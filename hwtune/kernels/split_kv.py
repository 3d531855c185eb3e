"""The split-KV scratch and merge shared by TRITON_ATTN, TURBOQUANT and HWTUNE_TRITON_MLA: each split of a request's
KV writes its normalised partial output and its LSE into one float32 workspace (``split_buffers``; its layout is
``configs.split_words``), and they are combined by LSE into the output, exactly for any split: by a second kernel
(``merge_splits``), or inside the attention kernel by the last split of each tile to finish (``merge_if_last``).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from hwtune.kernels._common import LaunchPlan, interpreting, jit_workload_generic, num_sms
from hwtune.kernels.configs import MERGE_COUNTER_WORDS, cdiv, is_decode_shape, next_pow2, split_words

#: The split-KV merge's work per program: one (token, head) output, or a slice of it no narrower than
#: ``MERGE_MIN_D`` where the (token, head) programs alone would not give every SM one (``merge_block_d``); its
#: splits are loaded ``MERGE_TILE // width`` at a time (4096 elements: 32 float32 registers a thread at 4 warps).
MERGE_MIN_D = 64
MERGE_TILE = 4096
#: (token, head) rows per SM below which the merge keeps one row per program, and the partials' elements a merge
#: program loads a step above it (``merge_rows_per_program``).
MERGE_MANY_ROWS_PER_SM = 8
MERGE_ROW_STEP = 512


@triton.jit
def _lse_weights(m, m_new, ls):
    """(rescale of what was merged so far, weights of the new splits) when the running maximum of the LSEs goes from
    ``m`` to ``m_new``: the rescale is 0 while nothing was seen (``m`` = -inf), a weight 0 for a split that saw no KV
    (LSE -inf)."""
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return tl.exp(m - m_safe), tl.exp(ls - m_safe)


@triton.jit
def _merged_lse(m, total):
    """The merged LSE from the running maximum ``m`` and the sum of weights ``total``; -inf where no split saw KV."""
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    return tl.where(total > 0.0, m_safe + tl.log(tl.where(total > 0.0, total, 1.0)), float("-inf"))


@jit_workload_generic
def _merge_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    qsl_ptr,
    batch,
    num_splits,
    stride_ps,
    stride_pt,
    stride_ph,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CHUNK: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """out = sum_s exp(lse_s - lse) * o_s with lse = log sum_s exp(lse_s): exact for any split of the KV.

    One program per (token, head, ``BLOCK_D`` slice of the head), one pass over the splits in chunks of ``CHUNK``
    with the running maximum rescaled as it grows (as the attention kernels do over KV tiles): the LSEs and partials
    are read once, and no chunk's loads wait on another chunk's arithmetic."""
    tok = tl.program_id(0)
    head = tl.program_id(1)
    d_blk = tl.program_id(2)
    if tok >= tl.load(qsl_ptr + batch):
        return  # padding tokens beyond the batch's queries are left untouched, like the unsplit path
    if USE_PDL:  # launched early (``merges_as_dependent``): the partials are complete only past this wait
        tl.extra.cuda.gdc_wait()
    base = tok.to(tl.int64) * stride_pt + head * stride_ph
    offs_s = tl.arange(0, CHUNK)
    offs_d = d_blk * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_D
    m = tl.max(tl.full([CHUNK], float("-inf"), tl.float32), 0)
    total = tl.sum(tl.zeros([CHUNK], tl.float32), 0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for s0 in range(0, num_splits, CHUNK):
        s_ok = s0 + offs_s < num_splits
        row = (s0 + offs_s).to(tl.int64) * stride_ps + base
        ls = tl.load(part_lse_ptr + row, mask=s_ok, other=float("-inf"))
        o = tl.load(part_o_ptr + row[:, None] * HEAD_D + offs_d[None, :], mask=s_ok[:, None] & d_ok[None, :], other=0.0)
        m_new = tl.maximum(m, tl.max(ls, 0))
        scale, w = _lse_weights(m, m_new, ls)  # w is 0 past the last split too
        o = o.to(tl.float32)  # 16-bit partials (``split_buffers``) are merged in float32
        acc = acc * scale + tl.sum(tl.where(w[:, None] > 0.0, o, 0.0) * w[:, None], 0)
        total = total * scale + tl.sum(w, 0)
        m = m_new
    o = acc / tl.where(total > 0.0, total, 1.0)
    tl.store(
        out_ptr + tok.to(tl.int64) * stride_ot + head * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty), mask=d_ok
    )
    if WRITE_LSE and d_blk == 0:
        lse = _merged_lse(m, total)
        tl.store(lse_ptr + tok.to(tl.int64) * stride_lt + head * stride_lh, lse)


@triton.jit
def _merge_rows(
    num_splits,
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    rows_tok,
    rows_head,
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
    HEAD_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Merge every split of ``BLOCK_R`` (token, head) rows, one split at a time (``[BLOCK_R, BLOCK_D]`` partials a
    step), and store the rows' output (and LSE). Partials are loaded past L1 (``.cg``): inside the attention kernel
    (``merge_if_last``) another launch's loads of the same addresses could have filled it; the merge kernel reads each
    once, so it loses nothing. Splits that saw no KV stored LSE -inf and weigh zero."""
    base = rows_tok.to(tl.int64) * stride_pt + rows_head * stride_ph
    mask = row_ok[:, None] & d_ok[None, :]
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for s in range(num_splits):
        row = s * stride_ps + base
        ls = tl.load(part_lse_ptr + row, mask=row_ok, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(part_o_ptr + row[:, None] * HEAD_D + offs_d[None, :], mask=mask, other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, ls)
        scale, w = _lse_weights(m, m_new, ls)
        acc = acc * scale[:, None] + tl.where(w[:, None] > 0.0, o.to(tl.float32), 0.0) * w[:, None]
        total = total * scale + w
        m = m_new
    o = acc / tl.where(total > 0.0, total, 1.0)[:, None]
    o_off = rows_tok.to(tl.int64) * stride_ot + rows_head * stride_oh
    tl.store(out_ptr + o_off[:, None] + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=mask)
    if WRITE_LSE:
        lse = _merged_lse(m, total)
        tl.store(lse_ptr + rows_tok.to(tl.int64) * stride_lt + rows_head * stride_lh, lse, mask=row_ok)


@jit_workload_generic
def _merge_rows_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    qsl_ptr,
    batch,
    num_splits,
    num_heads,
    num_rows,
    stride_ps,
    stride_pt,
    stride_ph,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """The merge for many (token, head) rows (a prefill's split launch): one program per ``BLOCK_R`` consecutive rows
    (token-major), whole heads, one split a step (``_merge_rows``). Rows of padding tokens are left untouched."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    tok = r // num_heads
    head = r % num_heads
    row_ok = (r < num_rows) & (tok < tl.load(qsl_ptr + batch))
    if USE_PDL:  # as in ``_merge_kernel``
        tl.extra.cuda.gdc_wait()
    offs_d = tl.arange(0, BLOCK_D)
    _merge_rows(
        num_splits, part_o_ptr, part_lse_ptr, out_ptr, lse_ptr, tok, head, row_ok, offs_d, offs_d < HEAD_D,
        stride_ps, stride_pt, stride_ph, stride_ot, stride_oh, stride_lt, stride_lh, HEAD_D, BLOCK_R, BLOCK_D,
        WRITE_LSE,
    )  # fmt: skip


@triton.jit
def merge_if_last(
    counter_ptr,
    num_splits,
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    rows_tok,
    rows_head,
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
    HEAD_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Called by every split of one (query tile, KV head) after it stored its partial: the last to arrive merges all
    the tile's splits into ``out`` (and ``lse``) and sets the counter back to zero for the next launch.

    WHY: a second merge kernel costs its launch and a dependency wait (2-4 us on an H100), a quarter of a small
    decode call. The pattern is the one CUDA's threadFenceReduction sample and cooperative groups' grid barrier use:
    a CTA barrier orders every thread's partial stores before one thread's gpu-scope release (the acq_rel atomic),
    and the last arriver's acquire makes every split's stores visible; its loads skip L1 (``.cg``), which another
    launch's loads of the same addresses could have filled. Splits that saw no KV stored LSE -inf and weigh zero."""
    tl.debug_barrier()
    ticket = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    if ticket == num_splits - 1:
        _merge_rows(
            num_splits, part_o_ptr, part_lse_ptr, out_ptr, lse_ptr, rows_tok, rows_head, row_ok, offs_d, d_ok,
            stride_ps, stride_pt, stride_ph, stride_ot, stride_oh, stride_lt, stride_lh, HEAD_D, BLOCK_M, BLOCK_D,
            WRITE_LSE,
        )  # fmt: skip
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")


#: The most KV splits a decode launch merges in the kernel. On an H100 (2026-11-27, benchmarks/results/experiments/
#: merge_in_kernel_h100_2026-11-27.jsonl: Mixtral-8x7B TP 2 and Llama-3.1-8B with fp8 KV, batch 1-128 x 700-12000,
#: the probe's timing) the same config's call took 0.95-1.00 of the two-kernel one at 2-4 splits, 1.00-1.06 at 6 and
#: 1.02-1.52 at 9-47: the last split of a tile reads its splits one after another; the merge kernel spreads them.
MERGE_IN_KERNEL_MAX_SPLITS = 4


def merges_in_kernel(plan: LaunchPlan, max_query_len: int, num_kv_heads: int) -> bool:
    """Whether a split launch merges its splits in the kernel (``split_kv.merge_if_last``) rather than in a second
    kernel: decode-style launches (a tile holds one request's few query rows) of at most
    ``MERGE_IN_KERNEL_MAX_SPLITS`` splits, while their (tile, KV head) counters fit the workspace's. A prefill-style
    tile's merge (128 rows of every split) would leave one program reading megabytes while the others idle."""
    return (
        is_decode_shape(max_query_len)
        and plan.num_splits <= MERGE_IN_KERNEL_MAX_SPLITS
        and plan.grid0 * num_kv_heads <= MERGE_COUNTER_WORDS
    )


def split_buffers(
    workspace: torch.Tensor | None,
    *,
    splits: int,
    num_tokens: int,
    num_heads: int,
    head_size: int,
    device: torch.device,
    partial_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views of the split-KV scratch: partial outputs [S, T, H, D] (``partial_dtype``: float32, or the output's 16-bit
    dtype to halve their traffic), partial LSEs [S, T, H] (float32) and the in-kernel merge's int32 counters
    [MERGE_COUNTER_WORDS], carved from one float32 workspace whose counters are zero (allocate it with
    ``torch.zeros``; every launch leaves them zero). Without a workspace one is allocated, its counters zeroed
    (sizes from host ints; fine under graph capture, but pass a preallocated one to keep the capture's memory fixed
    and save the zeroing)."""
    n_o = splits * num_tokens * num_heads * head_size
    words, need = split_words(
        num_splits=splits, num_tokens=num_tokens, num_heads=num_heads, head_size=head_size,
        partial_bytes=partial_dtype.itemsize,
    )  # fmt: skip
    if workspace is None:
        workspace = torch.empty(need, dtype=torch.float32, device=device)
        workspace[:MERGE_COUNTER_WORDS].zero_()
    elif workspace.dtype != torch.float32 or not workspace.is_contiguous() or workspace.numel() < need:
        raise ValueError(
            f"the split-KV workspace must be a contiguous float32 tensor of at least {need} elements "
            f"(workspace_size(num_tokens={num_tokens}, num_heads={num_heads}, head_size={head_size}, "
            f"num_splits={splits}) with {partial_dtype} partials, allocated with torch.zeros); got {workspace.dtype}, "
            f"{workspace.numel()} elements"
        )
    counters = workspace[:MERGE_COUNTER_WORDS].view(torch.int32)
    part_o = workspace[MERGE_COUNTER_WORDS:words].view(partial_dtype)[:n_o]
    part_o = part_o.view(splits, num_tokens, num_heads, head_size)
    part_lse = workspace[words:need].view(splits, num_tokens, num_heads)
    return part_o, part_lse, counters


def merge_rows_per_program(num_tokens: int, num_heads: int, head_size: int, sms: int) -> int:
    """(token, head) rows one merge program combines: 1 (``_merge_kernel``: a row, or a slice of one, per program, its
    splits a chunk at a time) below ``MERGE_MANY_ROWS_PER_SM`` rows per SM; from there (a prefill's split
    launch, a large decode batch) as many rows as make ``MERGE_ROW_STEP`` elements of partials a step (4 of head 128; 1
    of head 512, where the chunked kernel stays faster).

    Measured on an H100 (2026-11-27, benchmarks/results/experiments/merge_rows_h100_2026-11-27.jsonl, one call replayed
    from a CUDA graph): head 128, 3072 rows (a 96-token chunk, 32 heads) x 4-16 splits went from 10.5-13.2 us to
    3.9-9.3 with 4 rows a program, 12288 rows x 3 splits from 36.2 to 8.0, 32768 x 2 from 34.6 to 17.3, and a decode
    batch of 128 x 32 heads x 8 splits from 14.3 to 6.2; 8 rows were within 10 % of 4 where they were faster. At
    768 rows (under 8 a SM) and for head 512 (DeepSeek-V3 MLA, 128-2048 rows), one row a program was as fast or faster
    (1024 rows: 5.0 us with one, 3.6 with 8; kept at one)."""
    if num_tokens * num_heads < MERGE_MANY_ROWS_PER_SM * sms:
        return 1
    return max(1, MERGE_ROW_STEP // next_pow2(head_size))


def merge_block_d(num_tokens: int, num_heads: int, head_size: int, sms: int) -> int:
    """Width of the head slice one merge program combines: the whole (power-of-two padded) head where the (token, head)
    programs fill every SM at least once, else halved until they do or the slice reaches ``MERGE_MIN_D``.

    Measured on an H100 (2026-11-27, DeepSeek-V3 TP 8 decode: 16 heads of 512, page 16; benchmarks/results/
    experiments/mla_decode_gap_h100_2026-11-27*.jsonl): the merge's device time at batch 1-8 went from 2.5-7.3 us
    (whole heads, the two-pass kernel before) to 1.8-5.9 us; slicing every head in four regardless took batch 32-128
    (2048-8192 programs) from 3.8-4.8 us to 7.7-11.0 us, which this rule avoids (3.2-5.1 us there)."""
    whole = next_pow2(head_size)
    programs = max(1, num_tokens * num_heads)
    if programs >= sms:
        return whole
    slices = min(next_pow2(cdiv(sms, programs)), max(1, whole // MERGE_MIN_D))
    return whole // slices


#: Launch the split merge as a programmatic dependent of the attention kernel (Hopper's PDL: the merge kernel is
#: launched while the attention kernel's last programs finish, and waits for their partials in ``gdc_wait``); the
#: attention kernel signals it once a program's KV loop is done (``pdl_trigger``). Where it is used and why (measured on
#: an H200, decode-style launches only): docs/kernels.md, "The merge kernel as a programmatic dependent".
PDL_MERGE = True
#: Triton has grid-dependency control (``tl.extra.cuda.gdc_wait`` and the ``launch_pdl`` launch option: 3.4 or later).
_TRITON_HAS_PDL = hasattr(getattr(getattr(tl, "extra", None), "cuda", None), "gdc_wait")


def merges_as_dependent(device: torch.device, max_query_len: int) -> bool:
    """Whether a split launch's merge kernel is a programmatic dependent of its attention kernel (``PDL_MERGE``):
    decode-style launches (``max_query_len`` a decode's, speculative decode included), on an NVIDIA GPU of SM 9.0 or
    later (ROCm reports its devices as ``cuda`` too), outside Triton's interpreter, with a Triton that has it."""
    return (
        PDL_MERGE
        and _TRITON_HAS_PDL
        and is_decode_shape(max_query_len)
        and device.type == "cuda"
        and torch.version.hip is None
        and not interpreting()
        and _major(device.index if device.index is not None else torch.cuda.current_device()) >= 9
    )


@functools.lru_cache(maxsize=None)
def _major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


@triton.jit
def pdl_trigger(ENABLED: tl.constexpr):
    """Called by an attention kernel's program once its KV loop is done: the dependent merge kernel
    (``merges_as_dependent``) may be launched once every program has called it or exited."""
    if ENABLED:
        tl.extra.cuda.gdc_launch_dependents()


def merge_splits(
    part_o: torch.Tensor,
    part_lse: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    query_start_loc: torch.Tensor,
    batch: int,
    *,
    rows_per_program: int | None = None,
    pdl: bool = False,
) -> None:
    """Combine the split-KV partials into ``out`` (and ``lse``) by their LSEs: exact for any split, and padding
    tokens past the batch's queries are left untouched. ``rows_per_program``: (token, head) rows one program merges
    (``merge_rows_per_program`` unless given; 1: one row, or a slice of it, per program, its splits a chunk at a
    time). ``pdl``: launched as a programmatic dependent of the kernel just before it in the stream
    (``merges_as_dependent``): its programs read ``query_start_loc`` before ``gdc_wait`` and everything else after, so
    that kernel must not write ``query_start_loc``; its ``pdl_trigger`` only lets the merge launch earlier (a kernel
    that never triggers does so when it exits)."""
    splits, num_tokens, num_heads, head_size = part_o.shape
    lse_arg = lse if lse is not None else part_lse
    sms = num_sms(out.device)
    if rows_per_program is not None and (rows_per_program < 1 or rows_per_program & (rows_per_program - 1)):
        raise ValueError(f"rows_per_program must be a power of two >= 1, got {rows_per_program}")
    rows = rows_per_program or merge_rows_per_program(num_tokens, num_heads, head_size, sms)
    # ``launch_pdl`` only when on: a Triton without PDL (before 3.4) takes it for a kernel argument
    launch = {"USE_PDL": pdl, **({"launch_pdl": True} if pdl else {})}
    strides = (part_lse.stride(0), part_lse.stride(1), part_lse.stride(2), out.stride(0), out.stride(1))
    strides += (lse_arg.stride(0), lse_arg.stride(1))
    if rows > 1:
        _merge_rows_kernel[(cdiv(num_tokens * num_heads, rows),)](
            part_o, part_lse, out, lse_arg, query_start_loc, batch, splits, num_heads, num_tokens * num_heads,
            *strides, HEAD_D=head_size, BLOCK_D=next_pow2(head_size), BLOCK_R=rows, WRITE_LSE=lse is not None,
            num_warps=4, **launch,
        )  # fmt: skip
        return
    block_d = merge_block_d(num_tokens, num_heads, head_size, sms)
    _merge_kernel[(num_tokens, num_heads, cdiv(head_size, block_d))](
        part_o, part_lse, out, lse_arg, query_start_loc, batch, splits, *strides,
        HEAD_D=head_size, BLOCK_D=block_d, CHUNK=max(2, min(MERGE_TILE // block_d, next_pow2(splits))),
        WRITE_LSE=lse is not None, num_warps=4, **launch,
    )  # fmt: skip


__all__ = [
    "MERGE_IN_KERNEL_MAX_SPLITS",
    "MERGE_MIN_D",
    "merge_block_d",
    "merge_if_last",
    "merge_rows_per_program",
    "merge_splits",
    "merges_in_kernel",
    "merges_as_dependent",
    "pdl_trigger",
    "split_buffers",
]
