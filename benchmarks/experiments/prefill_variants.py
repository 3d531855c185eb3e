"""A/B of TRITON_ATTN prefill loop structures on a CUDA GPU (issue 5: prefill >= 50 % of the matmul rate).

The production kernel (``hwtune.kernels.triton_attention``) runs each query tile's KV tiles in two
loops: unmasked tiles, then the diagonal/tail tiles with every mask. A fit of its efficiency over shapes
suggested a fixed cost of several tile-times per program. Each loop is software-pipelined on its own, so the
second loop (usually one or two tiles) starts with an empty pipeline: its loads are exposed. This script
times variants of the same kernel (constexpr switches, one file, nothing in the package changes):

  base        two loops, as in the package
  heads       grid (KV head, query tile) instead of (query tile, KV head): all heads of the longest tiles first
  causal      three loops: unmasked, causal-only (score mask, unmasked loads), tail (every mask)
  one         one loop over every tile; loads always length-masked; score mask applied to every tile
  onebr       one loop; the score mask in a runtime branch taken only on the diagonal/tail tiles
  mst1        two loops, the masked loop not pipelined (``tl.range(num_stages=1)``)
  ws          two loops, ``warp_specialize=True`` on the unmasked loop (Hopper automatic warp specialization)
  persist*    persistent: one program per SM (``2x``: two) walks a longest-first list of (query tile,
              request, KV head) items; ``1``: one KV loop with the score mask in a branch; ``f``: the item
              loop is flattened with the KV loop (``tl.range(flatten=True)``) so loads of the next item
              can be issued during the current item's epilogue

Each variant's output and LSE are compared with the package kernel before it is timed (max abs error);
a variant that fails to compile or disagrees is reported as such, not timed.

    python benchmarks/experiments/prefill_variants.py [seconds] [variant,variant,...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels_bench import causal_flops, kv_bytes, paged, time_ms  # noqa: E402

from hwtune.kernels import triton_attention as ta  # noqa: E402
from hwtune.kernels._common import LOG2E, locate_qblock, num_sms, split_tile_range, store_result  # noqa: E402
from hwtune.kernels.configs import TritonAttnConfig  # noqa: E402


@triton.jit
def _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
          k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
          BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, LOAD_MASK: tl.constexpr, SCORE_MASK: tl.constexpr,
          BRANCH: tl.constexpr, first_masked):
    pos = j * BLOCK_N + offs_n
    page_idx = j * (BLOCK_N // PAGE_SIZE) + offs_n // PAGE_SIZE
    n_ok = pos < kv_end
    if LOAD_MASK:
        blk = tl.load(bt_row + page_idx, mask=n_ok, other=0).to(tl.int64)
        k = tl.load(k_base + (blk * stride_kb + k_in_page)[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
        v = tl.load(v_base + (blk * stride_vb + v_in_page)[:, None] + offs_d[None, :], mask=n_ok[:, None], other=0.0)
    else:
        blk = tl.load(bt_row + page_idx).to(tl.int64)
        k = tl.load(k_base + (blk * stride_kb + k_in_page)[:, None] + offs_d[None, :])
        v = tl.load(v_base + (blk * stride_vb + v_in_page)[:, None] + offs_d[None, :])
    qk = tl.dot(q, tl.trans(k))
    if BRANCH:
        if j >= first_masked:
            qk = tl.where((pos[None, :] <= rows_pos[:, None]) & n_ok[None, :], qk, float("-inf"))
    elif SCORE_MASK:
        qk = tl.where((pos[None, :] <= rows_pos[:, None]) & n_ok[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
    p = tl.exp2(qk * scale_log2 - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(q.dtype), v, acc=acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _var_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, qsl_ptr, out_ptr, lse_ptr,
    batch, scale_log2,
    stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
    stride_ot, stride_oh, stride_lt, stride_lh,
    HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr,
    HEADS_FIRST: tl.constexpr, MODE: tl.constexpr, MASK_STAGES: tl.constexpr, WS: tl.constexpr,
):
    if HEADS_FIRST:
        kv_head = tl.program_id(0)
        pid = tl.program_id(1)
    else:
        kv_head = tl.program_id(1)
        pid = tl.program_id(0)
    req, local = locate_qblock(pid, qsl_ptr, batch, BLOCK_Q, False)
    q_start = tl.load(qsl_ptr + req)
    q_len = tl.load(qsl_ptr + req + 1) - q_start
    n_qtiles = tl.cdiv(q_len, BLOCK_Q)
    if local >= n_qtiles:
        return
    qtile = n_qtiles - 1 - local
    seq_len = tl.load(seq_lens_ptr + req)
    ctx = seq_len - q_len
    rows = tl.arange(0, BLOCK_M)
    tok = qtile * BLOCK_Q + rows // GROUP
    row_ok = tok < q_len
    head = kv_head * GROUP + rows % GROUP
    rows_tok = q_start + tok
    rows_pos = ctx + tok
    offs_d = tl.arange(0, HEAD_D)
    q_off = rows_tok.to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    first_pos = ctx + qtile * BLOCK_Q
    kv_end = tl.minimum(seq_len, first_pos + BLOCK_Q)
    t0, t1, full_end = split_tile_range(kv_end, first_pos, 0, 1, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * stride_bt
    k_base = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + kv_head.to(tl.int64) * stride_vh
    offs_n = tl.arange(0, BLOCK_N)
    k_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_kt
    v_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_vt
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    if MODE == 0:  # two loops (package)
        for j in tl.range(t0, tl.minimum(t1, full_end), warp_specialize=WS):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, False, False, False, full_end)
        for j in tl.range(tl.maximum(t0, full_end), t1, num_stages=MASK_STAGES):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, True, True, False, full_end)
    elif MODE == 1:  # three loops: unmasked, causal-only, tail
        whole = kv_end // BLOCK_N  # tiles wholly below kv_end need no load mask
        for j in range(t0, tl.minimum(t1, full_end)):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, False, False, False, full_end)
        for j in range(tl.maximum(t0, full_end), tl.minimum(t1, whole)):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, False, True, False, full_end)
        for j in range(tl.maximum(tl.maximum(t0, full_end), whole), t1):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, True, True, False, full_end)
    elif MODE == 2:  # one loop, every tile masked
        for j in range(t0, t1):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, True, True, False, full_end)
    else:  # one loop, score mask in a runtime branch
        for j in range(t0, t1):
            acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n, offs_d,
                                  k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                  BLOCK_N, PAGE_SIZE, True, False, True, full_end)
    store_result(acc, m_i, l_i, rows_tok, head, row_ok, offs_d, offs_d < HEAD_D, 0,
                 out_ptr, lse_ptr, out_ptr, lse_ptr,
                 stride_ot, stride_oh, stride_lt, stride_lh, 0, 0, 0,
                 HEAD_D, False, True)


@triton.jit
def _persist_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, out_ptr, lse_ptr,
    n_work, n_qtiles, batch, q_len, scale_log2,
    stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
    stride_ot, stride_oh, stride_lt, stride_lh,
    HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr, NUM_KV_HEADS: tl.constexpr, ONE_LOOP: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    """Persistent: program p takes work items p, p + P, ... of a longest-first list (uniform batches only:
    every request has q_len new tokens). Item w: query tile local = w // (batch * H), then request, head."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    rows = tl.arange(0, BLOCK_M)
    k_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_kt
    v_in_page = (offs_n % PAGE_SIZE).to(tl.int64) * stride_vt
    for w in tl.range(tl.program_id(0), n_work, tl.num_programs(0), flatten=FLATTEN):
        local = w // (batch * NUM_KV_HEADS)
        rem = w % (batch * NUM_KV_HEADS)
        req = rem // NUM_KV_HEADS
        kv_head = rem % NUM_KV_HEADS
        qtile = n_qtiles - 1 - local
        seq_len = tl.load(seq_lens_ptr + req)
        ctx = seq_len - q_len
        tok = qtile * BLOCK_Q + rows // GROUP
        row_ok = tok < q_len
        head = kv_head * GROUP + rows % GROUP
        rows_tok = req * q_len + tok
        rows_pos = ctx + tok
        q_off = rows_tok.to(tl.int64) * stride_qt + head * stride_qh
        q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        first_pos = ctx + qtile * BLOCK_Q
        kv_end = tl.minimum(seq_len, first_pos + BLOCK_Q)
        t0, t1, full_end = split_tile_range(kv_end, first_pos, 0, 1, BLOCK_N)
        bt_row = bt_ptr + req.to(tl.int64) * stride_bt
        k_base = k_ptr + kv_head.to(tl.int64) * stride_kh
        v_base = v_ptr + kv_head.to(tl.int64) * stride_vh
        acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
        m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        if ONE_LOOP:
            for j in range(t0, t1):
                acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n,
                                      offs_d, k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                      BLOCK_N, PAGE_SIZE, True, False, True, full_end)
        else:
            for j in range(t0, tl.minimum(t1, full_end)):
                acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n,
                                      offs_d, k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                      BLOCK_N, PAGE_SIZE, False, False, False, full_end)
            for j in range(tl.maximum(t0, full_end), t1):
                acc, m_i, l_i = _tile(acc, m_i, l_i, q, k_base, v_base, bt_row, j, kv_end, rows_pos, offs_n,
                                      offs_d, k_in_page, v_in_page, stride_kb, stride_vb, scale_log2,
                                      BLOCK_N, PAGE_SIZE, True, True, False, full_end)
        store_result(acc, m_i, l_i, rows_tok, head, row_ok, offs_d, offs_d < HEAD_D, 0,
                     out_ptr, lse_ptr, out_ptr, lse_ptr,
                     stride_ot, stride_oh, stride_lt, stride_lh, 0, 0, 0,
                     HEAD_D, False, True)


VARIANTS = {  # name: (HEADS_FIRST, MODE, MASK_STAGES, WS)
    "base": (False, 0, None, False),
    "heads": (True, 0, None, False),
    "causal": (False, 1, None, False),
    "one": (False, 2, None, False),
    "onebr": (False, 3, None, False),
    "mst1": (False, 0, 1, False),
    "ws": (False, 0, None, True),
    "heads+onebr": (True, 3, None, False),
    "heads+causal": (True, 1, None, False),
}
PERSISTENT = {  # name: (programs per SM, ONE_LOOP, FLATTEN)
    "persist": (1, False, False),
    "persist2x": (2, False, False),
    "persist1": (1, True, False),
    "persist1f": (1, True, True),
    "persist2f": (2, True, True),
}


def run_persistent(p: dict, variant: str, cfg: TritonAttnConfig, out: torch.Tensor, lse: torch.Tensor):
    per_sm, one_loop, flatten = PERSISTENT[variant]
    k, v = p["kv"][:, 0], p["kv"][:, 1]
    group = p["h_q"] // p["h_kv"]
    block_m = cfg.block_m or 128
    block_q = block_m // group
    n_qtiles = -(-p["q_len"] // block_q)
    n_work = n_qtiles * p["batch"] * p["h_kv"]
    grid = (min(n_work, per_sm * num_sms(p["q"].device)),)
    scale = p["head_size"] ** -0.5 * LOG2E

    def call() -> None:
        _persist_kernel[grid](
            p["q"], k, v, p["table"], p["seq_lens"], out, lse, n_work, n_qtiles, p["batch"], p["q_len"], scale,
            p["q"].stride(0), p["q"].stride(1), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), p["table"].stride(0),
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            HEAD_D=p["head_size"], BLOCK_M=block_m, BLOCK_Q=block_q, BLOCK_N=cfg.block_n, GROUP=group,
            PAGE_SIZE=p["page"], NUM_KV_HEADS=p["h_kv"], ONE_LOOP=one_loop, FLATTEN=flatten,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return call


def run_variant(p: dict, variant: str, cfg: TritonAttnConfig, out: torch.Tensor, lse: torch.Tensor):
    if variant in PERSISTENT:
        return run_persistent(p, variant, cfg, out, lse)
    heads_first, mode, mst, ws = VARIANTS[variant]
    k, v = p["kv"][:, 0], p["kv"][:, 1]
    group = p["h_q"] // p["h_kv"]
    block_m = cfg.block_m or 128
    block_q = block_m // group
    n_tok = p["q"].shape[0]
    grid0 = n_tok // block_q + p["batch"]
    grid = (p["h_kv"], grid0) if heads_first else (grid0, p["h_kv"])
    scale = p["head_size"] ** -0.5 * LOG2E

    def call() -> None:
        _var_kernel[grid](
            p["q"], k, v, p["table"], p["seq_lens"], p["qsl"], out, lse, p["batch"], scale,
            p["q"].stride(0), p["q"].stride(1), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), p["table"].stride(0),
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            HEAD_D=p["head_size"], BLOCK_M=block_m, BLOCK_Q=block_q, BLOCK_N=cfg.block_n, GROUP=group,
            PAGE_SIZE=p["page"], HEADS_FIRST=heads_first, MODE=mode, MASK_STAGES=mst, WS=ws,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return call


def main() -> int:
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    selected = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else [*VARIANTS, *PERSISTENT]
    t_start = time.time()
    print(torch.cuda.get_device_name(0), "triton", triton.__version__, time.strftime("%Y-%m-%d"))
    configs = [TritonAttnConfig(128, 1, 8, 3, 128), TritonAttnConfig(128, 1, 8, 2, 128)]
    shapes = [(1, 4096, 4096), (4, 4096, 4096), (1, 8192, 8192), (1, 1000, 5000)]  # last: correctness only
    for batch, q_len, ctx in shapes:
        p = paged(batch, ctx, q_len=q_len)
        ref_o, ref_l = torch.empty_like(p["q"]), torch.empty_like(p["lse"])
        ta.paged_attention(p["q"], p["kv"][:, 0], p["kv"][:, 1], p["table"], p["seq_lens"], p["qsl"],
                           max_query_len=q_len, max_seq_len=ctx, out=ref_o, lse=ref_l,
                           softmax_scale=p["head_size"] ** -0.5)
        pkg_ms, _ = time_ms(lambda p=p: ta.paged_attention(
            p["q"], p["kv"][:, 0], p["kv"][:, 1], p["table"], p["seq_lens"], p["qsl"], max_query_len=q_len,
            max_seq_len=ctx, out=p["out"], lse=p["lse"], softmax_scale=p["head_size"] ** -0.5),
            touched_bytes=kv_bytes(p), inner=2, reps=30)
        tf = causal_flops(p) / pkg_ms / 1e9
        print(f"{batch}x{q_len} on {ctx}: package auto {pkg_ms * 1e3:8.1f} us {tf:6.1f} TFLOP/s")
        for cfg in configs:
            for name in selected:
                if time.time() - t_start > budget:
                    print("budget spent")
                    return 0
                out, lse = torch.full_like(p["q"], float("nan")), torch.full_like(p["lse"], float("nan"))
                t0 = time.time()
                try:
                    call = run_variant(p, name, cfg, out, lse)
                    call()
                    torch.cuda.synchronize()
                except Exception as exc:  # a variant that does not compile is reported, not timed
                    print(f"  {name:13s} {cfg.name():20s} FAILED {type(exc).__name__}: {str(exc)[:160]}")
                    continue
                err_o = (out.float() - ref_o.float()).abs().max().item()
                err_l = (lse - ref_l).abs().max().item()
                if not err_o < 2e-2 or not err_l < 1e-3:
                    print(f"  {name:13s} {cfg.name():20s} WRONG max|do| {err_o:.3g} max|dlse| {err_l:.3g}")
                    continue
                if q_len == 1000:
                    print(f"  {name:13s} {cfg.name():20s} ok (err {err_o:.2g})")
                    continue
                ms, _ = time_ms(call, touched_bytes=kv_bytes(p), inner=2, reps=30)
                print(f"  {name:13s} {cfg.name():20s} {ms * 1e3:8.1f} us {causal_flops(p) / ms / 1e9:6.1f} TFLOP/s "
                      f"(compile+check {time.time() - t0:.1f}s, err {err_o:.2g})")
        del p
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
