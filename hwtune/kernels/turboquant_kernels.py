"""Triton kernels of TURBOQUANT: quantize new K/V into pages, and paged attention on the codes.

Code layout (per token and KV head, ``HALF = D // 2``): the rotated vector's first half and second half
are stored apart so every kernel works on two [rows, HALF] tiles and never interleaves lanes. 4-bit: byte
``i`` holds dim ``i`` in its low nibble and dim ``i + HALF`` in its high nibble (``HALF`` bytes); 8-bit:
bytes ``[0, HALF)`` then ``[HALF, D)``. Per (token, head): ``scale`` and ``zero`` (float16), the value of
code ``c`` being ``c * scale + zero`` (asymmetric min-max quantizer over the rotated vector).

The rotation ``x' = ((x * s) @ H_D) / sqrt(D)`` is applied through Sylvester's recursion with the
half-size Hadamard matrix generated in registers (entry ``(-1)**popcount(i & j)``), as two bf16 tensor-core
dots on a hi/lo split of the float32 input (about 16 significant bits; H is exactly +-1 in bf16).

Attention never dequantizes to float first: codes become float16 ``1024 + c`` by OR-ing the exponent bits
of 1024 (integer ops at full rate instead of int-to-float conversions), then the exact float16 subtraction
of ``1024 + MID`` centres them (``MID = 2**(BITS - 1)``, so ``c - MID`` lies in [-8, 7] or [-128, 127]):

    q'.k = scale * (q'.(c - MID)) + (zero + MID * scale) * sum(q')
    sum_t p_t v_t = (p * scale) @ (c - MID) + sum_t (p * scale)_t * (zero / scale + MID)_t  (per lane)

with ``q'`` the rotated query (float16) and the last term a per-row scalar, accumulated in float32 apart
from the tensor-core dot and added after un-rotation, where it lands on lane 0 only (``ones @ H = D e0``).

WHY centred codes (not ``1024 + c`` straight into the dot): a tensor-core MMA does not round its float32
accumulation to nearest; it aligns the addends to the largest and drops the bits below (Fasi et al. 2021;
Khattak & Mikaitis 2025 for H100), a one-sided error when every addend is positive. With ``1024 + c`` the
accumulator held ``~1030 * sum(p * scale)`` per lane, ~1000x the attention output it is later cancelled
down to, so that bias, the same on every lane, survived as a lane-0 error after un-rotation (H100: 8x to
70x the other lanes' error). Centred codes keep the accumulator as small as the output it carries; the
interpreter shows the same with ``interp_runner --tensor-core-dot`` (tests/kernels).

The output is un-rotated before it is stored (split partials too: the LSE merge is linear, so merging
un-rotated partials is exact).
"""

from __future__ import annotations

import triton
import triton.language as tl

from hwtune.kernels._common import program_coords, query_tile, split_tile_range, store_result


@triton.jit
def hadamard_half(HALF: tl.constexpr):
    """Sylvester Hadamard matrix [HALF, HALF] of +-1 in bf16 (HALF <= 128)."""
    i = tl.arange(0, HALF)
    x = i[:, None] & i[None, :]
    x = x ^ (x >> 4)
    x = x ^ (x >> 2)
    x = x ^ (x >> 1)
    return (1 - 2 * (x & 1)).to(tl.float32).to(tl.bfloat16)  # via f32: the interpreter mis-casts int->bf16


@triton.jit
def load_hadamard(h_ptr, HALF: tl.constexpr):
    """The same matrix read from global memory (32 KiB at most, L2-resident). The attention kernel loads
    it before and after its KV loop so it is not held in registers or shared memory across the loop."""
    i = tl.arange(0, HALF)
    return tl.load(h_ptr + i[:, None] * HALF + i[None, :])


@triton.jit
def _dot_h(a, h):
    """a (float32 [M, HALF]) @ h (+-1), to about 16 bits: bf16 hi part + bf16 remainder."""
    a_hi = a.to(tl.bfloat16)
    a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
    return tl.dot(a_lo, h, acc=tl.dot(a_hi, h))


@triton.jit
def rotate_halves(u_lo, u_hi, h, inv_sqrt_d):
    """Halves of ``(u @ H_D) / sqrt(D)`` for u already multiplied by the signs."""
    return _dot_h(u_lo + u_hi, h) * inv_sqrt_d, _dot_h(u_lo - u_hi, h) * inv_sqrt_d


@triton.jit
def _quantize_one(
    x_ptr,
    row_off,
    ok,
    offs,
    s_lo,
    s_hi,
    h,
    inv_sqrt_d,
    codes_ptr,
    c_off,
    scale_ptr,
    zero_ptr,
    s_off,
    HALF: tl.constexpr,
    BITS: tl.constexpr,
):
    x_lo = tl.load(x_ptr + row_off[:, None] + offs[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    x_hi = tl.load(x_ptr + row_off[:, None] + HALF + offs[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    r_lo, r_hi = rotate_halves(x_lo * s_lo[None, :], x_hi * s_hi[None, :], h, inv_sqrt_d)
    qmax = (1 << BITS) - 1
    mx = tl.maximum(tl.max(r_lo, 1), tl.max(r_hi, 1))
    mn = tl.minimum(tl.min(r_lo, 1), tl.min(r_hi, 1))
    scale16 = tl.minimum((mx - mn) / qmax, 65504.0).to(tl.float16)
    zero16 = tl.minimum(tl.maximum(mn, -65504.0), 65504.0).to(tl.float16)
    scale = scale16.to(tl.float32)
    inv = tl.where(scale > 0.0, 1.0 / tl.where(scale > 0.0, scale, 1.0), 0.0)
    zero = zero16.to(tl.float32)
    c_lo = (tl.minimum(tl.maximum((r_lo - zero[:, None]) * inv[:, None], 0.0), qmax) + 0.5).to(tl.int32)
    c_hi = (tl.minimum(tl.maximum((r_hi - zero[:, None]) * inv[:, None], 0.0), qmax) + 0.5).to(tl.int32)
    if BITS == 4:
        tl.store(codes_ptr + c_off[:, None] + offs[None, :], (c_lo | (c_hi << 4)).to(tl.uint8), mask=ok[:, None])
    else:
        tl.store(codes_ptr + c_off[:, None] + offs[None, :], c_lo.to(tl.uint8), mask=ok[:, None])
        tl.store(codes_ptr + c_off[:, None] + HALF + offs[None, :], c_hi.to(tl.uint8), mask=ok[:, None])
    tl.store(scale_ptr + s_off, scale16, mask=ok)
    tl.store(zero_ptr + s_off, zero16, mask=ok)


@triton.jit
def tq_write_kernel(
    k_ptr,
    v_ptr,
    slot_ptr,
    signs_ptr,
    kc_ptr,
    vc_ptr,
    ks_ptr,
    kz_ptr,
    vs_ptr,
    vz_ptr,
    num_new,
    inv_sqrt_d,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_sb,
    stride_st,
    stride_sh,
    HEAD_D: tl.constexpr,
    BITS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    """Quantize BLOCK_T new tokens of one KV head (K and V) into their slots; slot < 0 is skipped."""
    HALF: tl.constexpr = HEAD_D // 2
    head = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < num_new
    slot = tl.load(slot_ptr + t, mask=t_ok, other=-1).to(tl.int64)
    ok = t_ok & (slot >= 0)
    slot = tl.where(ok, slot, 0)
    blk = slot // PAGE_SIZE
    off = slot % PAGE_SIZE
    c_off = blk * stride_cb + off * stride_ct + head * stride_ch
    s_off = blk * stride_sb + off * stride_st + head * stride_sh
    offs = tl.arange(0, HALF)
    s_lo = tl.load(signs_ptr + head * HEAD_D + offs)
    s_hi = tl.load(signs_ptr + head * HEAD_D + HALF + offs)
    h = hadamard_half(HALF)
    t64 = t.to(tl.int64)
    _quantize_one(
        k_ptr,
        t64 * stride_kt + head * stride_kh,
        ok,
        offs,
        s_lo,
        s_hi,
        h,
        inv_sqrt_d,
        kc_ptr,
        c_off,
        ks_ptr,
        kz_ptr,
        s_off,
        HALF,
        BITS,
    )
    _quantize_one(
        v_ptr,
        t64 * stride_vt + head * stride_vh,
        ok,
        offs,
        s_lo,
        s_hi,
        h,
        inv_sqrt_d,
        vc_ptr,
        c_off,
        vs_ptr,
        vz_ptr,
        s_off,
        HALF,
        BITS,
    )


@triton.jit
def _codes_tile(c_ptr, off, mask, offs, HALF: tl.constexpr, BITS: tl.constexpr, MASKED: tl.constexpr):
    """Codes of a [BLOCK_N] set of token rows as centred float16 ``c - 2**(BITS - 1)`` halves [BLOCK_N, HALF]
    (``1024 + c`` from the exponent bits, minus ``1024 + MID``: exact in float16, both lie in [1024, 2048))."""
    OFFSET: tl.constexpr = 1024.0 + (1 << (BITS - 1))
    ptrs = c_ptr + off[:, None] + offs[None, :]
    if MASKED:
        b = tl.load(ptrs, mask=mask[:, None], other=0)
    else:
        b = tl.load(ptrs)
    if BITS == 4:
        x = b.to(tl.int16)
        lo = ((x & 15) | 0x6400).to(tl.float16, bitcast=True) - OFFSET
        hi = ((x >> 4) | 0x6400).to(tl.float16, bitcast=True) - OFFSET
    else:
        if MASKED:
            b2 = tl.load(ptrs + HALF, mask=mask[:, None], other=0)
        else:
            b2 = tl.load(ptrs + HALF)
        lo = (b.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True) - OFFSET
        hi = (b2.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True) - OFFSET
    return lo, hi


@triton.jit
def _tq_tile(
    acc_lo,
    acc_hi,
    acc_z,
    m_i,
    l_i,
    q_lo,
    q_hi,
    q_sum,
    kc_base,
    vc_base,
    ks_base,
    kz_base,
    vs_base,
    vz_base,
    bt_row,
    j,
    kv_end,
    rows_pos,
    offs_n,
    offs_h,
    stride_cb,
    stride_ct,
    stride_sb,
    stride_st,
    scale_log2,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    BITS: tl.constexpr,
    MASKED: tl.constexpr,
):
    MID: tl.constexpr = 1 << (BITS - 1)
    pos = j * BLOCK_N + offs_n
    n_ok = pos < kv_end
    if MASKED:
        blk = tl.load(bt_row + pos // PAGE_SIZE, mask=n_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + pos // PAGE_SIZE).to(tl.int64)
    in_page = pos % PAGE_SIZE
    c_off = blk * stride_cb + in_page * stride_ct
    s_off = blk * stride_sb + in_page * stride_st
    k_lo, k_hi = _codes_tile(kc_base, c_off, n_ok, offs_h, HALF, BITS, MASKED)
    if MASKED:
        ks = tl.load(ks_base + s_off, mask=n_ok, other=0.0).to(tl.float32)
        kz = tl.load(kz_base + s_off, mask=n_ok, other=0.0).to(tl.float32)
    else:
        ks = tl.load(ks_base + s_off).to(tl.float32)
        kz = tl.load(kz_base + s_off).to(tl.float32)
    raw = tl.dot(q_lo, tl.trans(k_lo), acc=tl.dot(q_hi, tl.trans(k_hi)))
    qk = (raw * ks[None, :] + q_sum[:, None] * (kz + MID * ks)[None, :]) * scale_log2
    if MASKED:
        keep = (pos[None, :] <= rows_pos[:, None]) & n_ok[None, :]
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v_lo, v_hi = _codes_tile(vc_base, c_off, n_ok, offs_h, HALF, BITS, MASKED)
    if MASKED:
        vs = tl.load(vs_base + s_off, mask=n_ok, other=0.0).to(tl.float32)
        vz = tl.load(vz_base + s_off, mask=n_ok, other=0.0).to(tl.float32)
    else:
        vs = tl.load(vs_base + s_off).to(tl.float32)
        vz = tl.load(vz_base + s_off).to(tl.float32)
    pv = (p * vs[None, :]).to(tl.float16)
    pv32 = pv.to(tl.float32)
    # zero term with the same rounded weights: sum_t pv_t * (c_t + zero_t / scale_t) is the rounded-weight
    # sum of the dequantized values, so pv's fp16 rounding scales each value (like p's rounding in plain
    # attention) instead of adding a lane-constant error that un-rotation would pile onto one output lane;
    # float32 FMA/adds here (round to nearest), never through the tensor cores
    z_per_scale = tl.where(vs > 0.0, vz / tl.where(vs > 0.0, vs, 1.0) + MID, 0.0)
    z_term = tl.where(vs[None, :] > 0.0, pv32 * z_per_scale[None, :], p * vz[None, :])
    acc_z = acc_z * alpha + tl.sum(z_term, 1)
    acc_lo = tl.dot(pv, v_lo, acc=acc_lo * alpha[:, None])
    acc_hi = tl.dot(pv, v_hi, acc=acc_hi * alpha[:, None])
    return acc_lo, acc_hi, acc_z, m_new, l_i


@triton.jit
def tq_attn_kernel(
    q_ptr,
    kc_ptr,
    vc_ptr,
    ks_ptr,
    kz_ptr,
    vs_ptr,
    vz_ptr,
    signs_ptr,
    h_ptr,
    bt_ptr,
    seq_lens_ptr,
    qsl_ptr,
    out_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    batch,
    num_kv_heads,
    num_splits,
    scale_log2,
    inv_sqrt_d,
    stride_qt,
    stride_qh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_sb,
    stride_st,
    stride_sh,
    stride_bt,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_ps,
    stride_pt,
    stride_ph,
    HEAD_D: tl.constexpr,
    BITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    ONE_PER_REQ: tl.constexpr,
    HEADS_FAST: tl.constexpr,
    SPLIT: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Paged attention on TurboQuant codes: one program per (query tile, KV head, split); rotates the query, scores
    and accumulates on centred codes, un-rotates, then stores the output or its split partial (see the module
    docstring)."""
    HALF: tl.constexpr = HEAD_D // 2
    pid_q, kv_head, split = program_coords(num_kv_heads, HEADS_FAST)
    tiles_left, req, rows_tok, rows_pos, head, row_ok, first_pos, kv_end = query_tile(
        pid_q, kv_head, qsl_ptr, seq_lens_ptr, batch, BLOCK_M, BLOCK_Q, GROUP, ONE_PER_REQ
    )
    if tiles_left <= 0:
        return
    offs_h = tl.arange(0, HALF)
    h = load_hadamard(h_ptr, HALF)
    s_lo = tl.load(signs_ptr + kv_head * HEAD_D + offs_h)
    s_hi = tl.load(signs_ptr + kv_head * HEAD_D + HALF + offs_h)
    q_off = rows_tok.to(tl.int64) * stride_qt + head * stride_qh
    q_lo = tl.load(q_ptr + q_off[:, None] + offs_h[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    q_hi = tl.load(q_ptr + q_off[:, None] + HALF + offs_h[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    r_lo, r_hi = rotate_halves(q_lo * s_lo[None, :], q_hi * s_hi[None, :], h, inv_sqrt_d)
    q_lo = r_lo.to(tl.float16)
    q_hi = r_hi.to(tl.float16)
    q_sum = tl.sum(q_lo.to(tl.float32), 1) + tl.sum(q_hi.to(tl.float32), 1)

    t0, t1, full_end = split_tile_range(kv_end, first_pos, split, num_splits, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * stride_bt
    kc_base = kc_ptr + kv_head.to(tl.int64) * stride_ch
    vc_base = vc_ptr + kv_head.to(tl.int64) * stride_ch
    ks_base = ks_ptr + kv_head.to(tl.int64) * stride_sh
    kz_base = kz_ptr + kv_head.to(tl.int64) * stride_sh
    vs_base = vs_ptr + kv_head.to(tl.int64) * stride_sh
    vz_base = vz_ptr + kv_head.to(tl.int64) * stride_sh
    offs_n = tl.arange(0, BLOCK_N)
    acc_lo = tl.zeros([BLOCK_M, HALF], tl.float32)
    acc_hi = tl.zeros([BLOCK_M, HALF], tl.float32)
    acc_z = tl.zeros([BLOCK_M], tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    for j in range(t0, tl.minimum(t1, full_end)):
        acc_lo, acc_hi, acc_z, m_i, l_i = _tq_tile(
            acc_lo,
            acc_hi,
            acc_z,
            m_i,
            l_i,
            q_lo,
            q_hi,
            q_sum,
            kc_base,
            vc_base,
            ks_base,
            kz_base,
            vs_base,
            vz_base,
            bt_row,
            j,
            kv_end,
            rows_pos,
            offs_n,
            offs_h,
            stride_cb,
            stride_ct,
            stride_sb,
            stride_st,
            scale_log2,
            BLOCK_N,
            PAGE_SIZE,
            HALF,
            BITS,
            False,
        )
    for j in range(tl.maximum(t0, full_end), t1):
        acc_lo, acc_hi, acc_z, m_i, l_i = _tq_tile(
            acc_lo,
            acc_hi,
            acc_z,
            m_i,
            l_i,
            q_lo,
            q_hi,
            q_sum,
            kc_base,
            vc_base,
            ks_base,
            kz_base,
            vs_base,
            vz_base,
            bt_row,
            j,
            kv_end,
            rows_pos,
            offs_n,
            offs_h,
            stride_cb,
            stride_ct,
            stride_sb,
            stride_st,
            scale_log2,
            BLOCK_N,
            PAGE_SIZE,
            HALF,
            BITS,
            True,
        )
    # un-rotate the (unnormalised) accumulators: o = ((o' @ H_D) / sqrt(D)) * signs, by halves. The
    # lane-constant zero term acc_z maps to (acc_z * ones) @ H_D / sqrt(D) = acc_z * sqrt(D) * e0: added
    # to lane 0 in float32 instead of riding through the bf16 hi/lo split of the un-rotation dot
    o_lo, o_hi = rotate_halves(acc_lo, acc_hi, load_hadamard(h_ptr, HALF), inv_sqrt_d)
    o_lo = o_lo + tl.where((offs_h == 0)[None, :], (acc_z * (HEAD_D * inv_sqrt_d))[:, None], 0.0)
    o_lo = o_lo * tl.load(signs_ptr + kv_head * HEAD_D + offs_h)[None, :]
    o_hi = o_hi * tl.load(signs_ptr + kv_head * HEAD_D + HALF + offs_h)[None, :]
    d_ok = offs_h < HALF
    store_result(
        o_lo,
        m_i,
        l_i,
        rows_tok,
        head,
        row_ok,
        offs_h,
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
    store_result(
        o_hi,
        m_i,
        l_i,
        rows_tok,
        head,
        row_ok,
        offs_h + HALF,
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
