"""Where TRITON_ATTN prefill loses its time: page gathers versus TMA tile loads (issue 5, Hopper).

The package kernel loads each 128-token KV tile with pointer gathers (one 64-bit address per 16-byte
vector, per page of 16 tokens), which costs registers in a kernel already at 255 per thread. On Hopper a
tile that lies inside one page can instead be one TMA copy (a tensor descriptor), with no per-element
addresses and hardware-tracked arrival. This script measures, on the same causal-prefill shapes:

  pkg/page16   the package kernel, 16-token pages (what kernels_bench reports)
  pkg/page128  the package kernel with gathers, 128-token pages: does the page size matter to gathers?
  pkg/page128/tma  the package kernel's TMA path (``kv_loads="tma"``, auto config), added after the
               first run of this script
  tma2/pageP   the same algorithm (query tile, two KV loops, online softmax) with K/V tiles loaded by a
               2-D TMA descriptor over separate contiguous K and V caches; page P = 128 or the whole
               context (one page per request: the contiguous-KV ceiling of this loop in Triton)
  tma3/page128 a 3-D descriptor over the FlashInfer-style [blocks, 2, page, heads, D] cache (K and V of a
               block interleaved), loaded tiles reshaped to 2-D
  *-ws         the unmasked loop with ``warp_specialize=True``

Each variant's output and LSE are compared with the package kernel (gathers) on the same data before it is
timed.

    python benchmarks/experiments/prefill_tma.py [seconds] [variant,variant,...]
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels_bench import causal_flops, kv_bytes, paged, time_ms  # noqa: E402

from hwtune.kernels import triton_attention as ta  # noqa: E402
from hwtune.kernels._common import (  # noqa: E402
    LOG2E,
    program_coords,
    query_tile,
    split_tile_range,
    store_result,
)


@triton.jit
def _tma_tile(acc, m_i, l_i, q, desc_k, desc_v, bt_row, j, kv_end, rows_pos, offs_n, kv_head, num_kv_heads,
              scale_log2, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr,
              HND: tl.constexpr, RANK3: tl.constexpr, MASKED: tl.constexpr, ROWS_PER_BLOCK: tl.constexpr):
    start = j * BLOCK_N
    blk = tl.load(bt_row + start // PAGE_SIZE)
    in_page = start % PAGE_SIZE
    if RANK3:  # [blocks, page, heads * D] view of the interleaved cache
        k = tl.reshape(desc_k.load([blk, in_page, kv_head * HEAD_D]), [BLOCK_N, HEAD_D])
        v = tl.reshape(desc_v.load([blk, in_page, kv_head * HEAD_D]), [BLOCK_N, HEAD_D])
    elif HND:  # [blocks * heads * page, D]
        row = (blk * num_kv_heads + kv_head) * PAGE_SIZE + in_page
        k = desc_k.load([row, 0])
        v = desc_v.load([row, 0])
    else:  # [blocks * page, heads * D]; interleaved K/V: [blocks * 2 * page, heads * D]
        row = blk * ROWS_PER_BLOCK + in_page
        k = desc_k.load([row, kv_head * HEAD_D])
        v = desc_v.load([row, kv_head * HEAD_D])
    qk = tl.dot(q, tl.trans(k))
    pos = start + offs_n
    if MASKED:
        n_ok = pos < kv_end
        v = tl.where(n_ok[:, None], v, 0.0).to(q.dtype)  # rows past the context may hold NaN: never weigh them
        qk = tl.where((pos[None, :] <= rows_pos[:, None]) & n_ok[None, :], qk * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
        p = tl.exp2(qk * scale_log2 - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(q.dtype), v, acc=acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _tma_kernel(q_ptr, desc_k, desc_v, bt_ptr, seq_lens_ptr, qsl_ptr, out_ptr, lse_ptr,
                batch, num_kv_heads, scale_log2, stride_qt, stride_qh, stride_bt, stride_ot, stride_oh,
                stride_lt, stride_lh,
                HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
                GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr, HEADS_FAST: tl.constexpr, HND: tl.constexpr,
                RANK3: tl.constexpr, WS: tl.constexpr, ROWS_PER_BLOCK: tl.constexpr):
    pid_q, kv_head, split = program_coords(num_kv_heads, HEADS_FAST)
    tiles_left, req, rows_tok, rows_pos, head, row_ok, first_pos, kv_end = query_tile(
        pid_q, kv_head, qsl_ptr, seq_lens_ptr, batch, BLOCK_M, BLOCK_Q, GROUP, False)
    if tiles_left <= 0:
        return
    offs_d = tl.arange(0, HEAD_D)
    q_off = rows_tok.to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    t0, t1, full_end = split_tile_range(kv_end, first_pos, 0, 1, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * stride_bt
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    for j in tl.range(t0, tl.minimum(t1, full_end), warp_specialize=WS):
        acc, m_i, l_i = _tma_tile(acc, m_i, l_i, q, desc_k, desc_v, bt_row, j, kv_end, rows_pos, offs_n,
                                  kv_head, num_kv_heads, scale_log2, HEAD_D, BLOCK_N, PAGE_SIZE, HND, RANK3, False,
                                  ROWS_PER_BLOCK)
    for j in range(tl.maximum(t0, full_end), t1):
        acc, m_i, l_i = _tma_tile(acc, m_i, l_i, q, desc_k, desc_v, bt_row, j, kv_end, rows_pos, offs_n,
                                  kv_head, num_kv_heads, scale_log2, HEAD_D, BLOCK_N, PAGE_SIZE, HND, RANK3, True,
                                  ROWS_PER_BLOCK)
    store_result(acc, m_i, l_i, rows_tok, head, row_ok, offs_d, offs_d < HEAD_D, split,
                 out_ptr, lse_ptr, out_ptr, lse_ptr, stride_ot, stride_oh, stride_lt, stride_lh, 0, 0, 0,
                 HEAD_D, False, True)


def descriptors(p: dict, rank3: bool, block_n: int, interleaved: bool = False) -> tuple[TensorDescriptor, TensorDescriptor]:
    """K and V descriptors: 3-D or 2-D over the interleaved cache, or 2-D over separate contiguous copies."""
    d, h, page = p["head_size"], p["h_kv"], p["page"]
    if interleaved:  # rows of h * D, a block being 2 * page rows (its K page, then its V page)
        assert p["layout"] == "NHD"
        k, v = p["kv"][:, 0], p["kv"][:, 1]
        shape, strides = [(k.shape[0] - 1) * 2 * page + page, h * d], [h * d, 1]
        return (TensorDescriptor(k, shape, strides, [block_n, d]), TensorDescriptor(v, shape, strides, [block_n, d]))
    if rank3:
        assert p["layout"] == "NHD"
        k, v = p["kv"][:, 0], p["kv"][:, 1]
        shape, strides = [k.shape[0], page, h * d], [k.stride(0), h * d, 1]
        return (TensorDescriptor(k, shape, strides, [1, block_n, d]),
                TensorDescriptor(v, shape, strides, [1, block_n, d]))
    if "k2" not in p:
        p["k2"], p["v2"] = p["kv"][:, 0].contiguous(), p["kv"][:, 1].contiguous()
    k, v = p["k2"], p["v2"]
    if p["layout"] == "HND":
        shape, strides = [k.numel() // d, d], [d, 1]
    else:
        shape, strides = [k.numel() // (h * d), h * d], [h * d, 1]
    return (TensorDescriptor(k, shape, strides, [block_n, d]), TensorDescriptor(v, shape, strides, [block_n, d]))


def tma_call(p: dict, *, rank3: bool, ws: bool, stages: int, out: torch.Tensor, lse: torch.Tensor,
             interleaved: bool = False):
    group = p["h_q"] // p["h_kv"]
    block_m, block_n = 128, 128
    block_q = block_m // group
    desc_k, desc_v = descriptors(p, rank3, block_n, interleaved)
    grid0 = p["q"].shape[0] // block_q + p["batch"]
    kv_req = 2 * p["ctx"] * p["h_kv"] * p["head_size"] * 2
    heads_fast = kv_req <= torch.cuda.get_device_properties(0).L2_cache_size // 2
    grid = (grid0 * p["h_kv"], 1, 1) if heads_fast else (grid0, p["h_kv"], 1)
    scale = p["head_size"] ** -0.5 * LOG2E

    def call() -> None:
        call.compiled = _tma_kernel[grid](
            p["q"], desc_k, desc_v, p["table"], p["seq_lens"], p["qsl"], out, lse, p["batch"], p["h_kv"], scale,
            p["q"].stride(0), p["q"].stride(1), p["table"].stride(0), out.stride(0), out.stride(1),
            lse.stride(0), lse.stride(1),
            HEAD_D=p["head_size"], BLOCK_M=block_m, BLOCK_Q=block_q, BLOCK_N=block_n, GROUP=group,
            PAGE_SIZE=p["page"], HEADS_FAST=heads_fast, HND=p["layout"] == "HND", RANK3=rank3, WS=ws,
            ROWS_PER_BLOCK=p["page"] * (2 if interleaved else 1),
            num_warps=8, num_stages=stages)
    return call


def pkg_call(p: dict, out: torch.Tensor, lse: torch.Tensor, kv_loads: str = "gather", *, separate: bool = False,
             stages: int = 0, block_n: int = 0):
    """The package kernel. ``separate``: K and V in two contiguous caches (vLLM's FlashAttention layout)
    rather than interleaved per block (FlashInfer's); ``stages``/``block_n``: override the auto config's."""
    if p["page"] > 128:  # one page per request: the package takes it repacked into 16-token pages
        b, _, ctx, h, d = p["kv"].shape
        kv = p["kv"].view(b, 2, ctx // 16, 16, h, d).transpose(1, 2).reshape(b * ctx // 16, 2, 16, h, d)
        req_page = p["table"][:, :1].to(torch.int32) * (ctx // 16)  # requests' pages are shuffled
        table = req_page + torch.arange(ctx // 16, device=kv.device, dtype=torch.int32)[None, :]
        p = {**p, "kv": kv, "table": table, "page": 16}
    if separate and "k2" not in p:
        p["k2"], p["v2"] = p["kv"][:, 0].contiguous(), p["kv"][:, 1].contiguous()
    k, v = (p["k2"], p["v2"]) if separate else (p["kv"][:, 0], p["kv"][:, 1])
    config = None
    if stages or block_n:
        from kernels_bench import auto_config

        auto = auto_config(p)
        config = dataclasses.replace(auto, num_stages=stages or auto.num_stages, block_n=block_n or auto.block_n)
    return lambda: ta.paged_attention(p["q"], k, v, p["table"], p["seq_lens"], p["qsl"],
                                      max_query_len=p["q_len"], max_seq_len=p["ctx"], out=out, lse=lse,
                                      softmax_scale=p["head_size"] ** -0.5, kv_layout=p["layout"], kv_loads=kv_loads,
                                      config=config)


# name -> (kind, page, rank3, warp_specialize, stages, layout); page 0 = the whole context
VARIANTS = {
    "pkg/page16": ("pkg", 16, False, False, 0, "NHD"),
    "pkg/page128": ("pkg", 128, False, False, 0, "NHD"),
    "pkg/page128/tma": ("pkg-tma", 128, False, False, 0, "NHD"),  # the package's TMA path (auto config)
    "pkg/page128/tma/st3": ("pkg-tma", 128, False, False, 3, "NHD"),
    "pkg/page128/tma/sep": ("pkg-tma-sep", 128, False, False, 0, "NHD"),
    "pkg/page128/tma/sep/st3": ("pkg-tma-sep", 128, False, False, 3, "NHD"),
    "tma2i/page128/s2": ("tma-i", 128, False, False, 2, "NHD"),  # this script's kernel, interleaved cache
    # 64-token pages: the auto config's 128-token tiles span two pages (gathers); 64-token tiles fit one
    "pkg/page64": ("pkg", 64, False, False, 0, "NHD"),
    "pkg/page64/n64/tma/st2": ("pkg-tma-n64", 64, False, False, 2, "NHD"),
    "pkg/page64/n64/tma/st3": ("pkg-tma-n64", 64, False, False, 3, "NHD"),
    "pkg/page64/n64/tma/st4": ("pkg-tma-n64", 64, False, False, 4, "NHD"),
    "tma2/page128": ("tma", 128, False, False, 3, "NHD"),
    "tma2/page128/s2": ("tma", 128, False, False, 2, "NHD"),
    "tma2/page128/s4": ("tma", 128, False, False, 4, "NHD"),
    "tma2/page128/HND": ("tma", 128, False, False, 3, "HND"),
    "tma2/page128-ws": ("tma", 128, False, True, 3, "NHD"),
    "tma3/page128": ("tma", 128, True, False, 3, "NHD"),
    "tma2/dense": ("tma", 0, False, False, 3, "NHD"),
}


def main() -> int:
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    selected = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else list(VARIANTS)
    t_start = time.time()
    print(torch.cuda.get_device_name(0), "triton", triton.__version__, time.strftime("%Y-%m-%d %H:%M"))
    shapes = [(1, 1000, 4992), (1, 4096, 4096), (4, 4096, 4096), (1, 8192, 8192), (1, 4096, 8192)]
    for batch, q_len, ctx in shapes:
        for name in selected:
            kind, page, rank3, ws, stages, layout = VARIANTS[name]
            if time.time() - t_start > budget:
                print("budget spent")
                return 0
            p = paged(batch, ctx, q_len=q_len, page=page or ctx, layout=layout)  # page 0: one page per request
            ref_o, ref_l = torch.empty_like(p["q"]), torch.empty_like(p["lse"])
            pkg_call(p, ref_o, ref_l)()
            out, lse = torch.full_like(p["q"], float("nan")), torch.full_like(p["lse"], float("nan"))
            t0 = time.time()
            try:
                if kind.startswith("pkg"):
                    call = pkg_call(p, out, lse, "gather" if kind == "pkg" else "tma", separate=kind.endswith("sep"),
                                    stages=stages, block_n=64 if kind.endswith("n64") else 0)
                else:
                    call = tma_call(p, rank3=rank3, ws=ws, stages=stages, out=out, lse=lse,
                                    interleaved=kind == "tma-i")
                call()
                torch.cuda.synchronize()
            except Exception as exc:  # a variant that does not compile is reported, not timed
                print(f"  {name:18s} FAILED {type(exc).__name__}: {str(exc)[:300]}")
                continue
            err_o = (out.float() - ref_o.float()).abs().max().item()
            err_l = (lse - ref_l).abs().max().item()
            label = f"{batch}x{q_len} on {ctx}"
            if not err_o < 2e-2 or not err_l < 1e-3:
                print(f"{label:18s} {name:18s} WRONG max|do| {err_o:.3g} max|dlse| {err_l:.3g}")
                continue
            if q_len == 1000:
                ck = getattr(call, "compiled", None)
                regs = f", {ck.n_regs} regs, {ck.n_spills} spills, {ck.metadata.shared} B smem" if ck else ""
                print(f"{label:18s} {name:18s} ok (err {err_o:.2g}, compile+check {time.time() - t0:.1f}s{regs})")
                continue
            ms, _ = time_ms(call, touched_bytes=kv_bytes(p), inner=2, reps=30)
            print(f"{label:18s} {name:18s} {ms * 1e3:8.1f} us {causal_flops(p) / ms / 1e9:6.1f} TFLOP/s "
                  f"(err {err_o:.2g})")
            del p, out, lse, ref_o, ref_l
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
