"""A Gluon prefill kernel built for FlashAttention-3's intra-warpgroup overlap (not yet run on a GPU): tile t+1's Q.K^T
and tile t's P.V warpgroup MMAs are issued together, so that tile t+1's softmax can run while P.V does. An experiment
toward the long-chunk prefill gap (docs/kernels.md "Limits", against fa3), which ``tl.dot`` cannot close: Triton 3.6
waits for every Q.K^T MMA before the softmax that follows (``wgmma_waits.py``).

The kernel (``OVERLAP`` off: Q.K^T, softmax and P.V one after another, for an A/B at the same prefetch depth): one
request's causal chunk of ``q_len`` tokens after ``prefix`` cached ones. A program owns a query tile of ``BLOCK_M``
rows of (token, query head of one KV head's group), TRITON_ATTN's GQA packing. K and V tiles of ``BLOCK_N`` positions
are gathered over ``PAGE``-token pages of an NHD cache by cp.async into a ring of ``STAGES`` shared-memory slots (a
tile's block-table entries loaded when its copies are issued; its slot refilled once its P.V is done). Q.K^T and P.V
are warpgroup MMAs (Q, K and V from shared memory, P from registers); the online softmax runs in base 2 with the scale
folded into the exponent; tiles past the chunk's first position are masked (causal) in the same loop. bf16 only, one
request, no splits: enough to measure whether the overlap pays.

Status: compiled for SM 9.0 on a CPU (``--compile-only``: registers, spills, shared memory, and whether ptxas
serialized the MMAs, which it does where an MMA result is in flight across a loop's back edge; it exits 1 then) on
2026-11-29; not yet run on a GPU. On a GPU ``main`` checks every variant against the float32 reference of the GPU
tests (tests/kernels/reference.py, TRITON_ATTN's tolerance), times the plain and overlapped loops and TRITON_ATTN's
auto config on the same cache, each replayed from a CUDA graph, and checks the replays' output again. Written for
Triton 3.6 (the device's); Gluon's API changed after it, and the script refuses other versions.

    python benchmarks/experiments/gluon_prefill.py --compile-only     (CPU; Triton 3.6: PYTHONPATH=DIR of triton 3.6.0)
    python benchmarks/experiments/gluon_prefill.py [--out FILE.jsonl] (GPU, SM 9.0)
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

import triton  # noqa: E402

if not triton.__version__.startswith("3.6."):  # Gluon is experimental: its API changed after 3.6
    raise SystemExit(f"gluon_prefill.py is written for Triton 3.6 (the device's); this is {triton.__version__}")

import compiled_buffers as cb  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.ampere import async_copy  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)
from wgmma_waits import ptx_loops  # noqa: E402

#: (model, query heads, KV heads, chunk, prefix): long-chunk oracle shapes of the H200 regret runs where an fa3-class
#: kernel leads TRITON_ATTN, three KV-head group sizes: Llama-3.1-8B (`fa3_vllm`: FLASH_ATTN 1.29x, 1.35x, 1.44x),
#: Qwen3-30B-A3B TP 4 (`pdl_merge`: FlashInfer's fa3 1.23x), ChatGLM2-6B (`dense_refresh`: FlashInfer's fa3 1.20x).
PROBLEMS = [
    ("llama-3.1-8b", 32, 8, 1536, 0),
    ("llama-3.1-8b", 32, 8, 3000, 1500),
    ("llama-3.1-8b", 32, 8, 6000, 0),
    ("qwen3-30b-a3b-tp4", 8, 1, 6000, 30000),
    ("chatglm2-6b", 32, 2, 3000, 6000),
]


@gluon.jit
def _issue_tile(src, k_ring, v_ring, t, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, PAGE: gl.constexpr,
                STAGES: gl.constexpr, LD: gl.constexpr):  # fmt: skip
    """cp.async copies of tile ``t``'s K and V into ring slot ``t % STAGES``, committed as one group; positions past
    ``kv_end`` are zero-filled (a masked cp.async copies nothing and writes zeros), so the NaN an engine may leave past
    the context never reaches P.V. ``src``: (k_ptr, v_ptr, block-table row, KV head, kv_end, the six cache strides)."""
    k_ptr, v_ptr, bt_ptr, kv_head, kv_end, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh = src
    pos = t * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD))
    ok = pos < kv_end
    blk = gl.load(bt_ptr + pos // PAGE, mask=ok, other=0).to(gl.int64)
    d = gl.expand_dims(gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, LD)), 0)
    k_row = blk * stride_kb + (pos % PAGE).to(gl.int64) * stride_kt + kv_head * stride_kh
    v_row = blk * stride_vb + (pos % PAGE).to(gl.int64) * stride_vt + kv_head * stride_vh
    mask = gl.expand_dims(ok, 1)
    slot = t % STAGES
    async_copy.async_copy_global_to_shared(k_ring.index(slot), k_ptr + gl.expand_dims(k_row, 1) + d, mask=mask)
    async_copy.async_copy_global_to_shared(v_ring.index(slot), v_ptr + gl.expand_dims(v_row, 1) + d, mask=mask)
    async_copy.commit_group()


@gluon.jit
def _refill(src, k_ring, v_ring, t, n_tiles, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, PAGE: gl.constexpr,
            STAGES: gl.constexpr, LD: gl.constexpr):  # fmt: skip
    """Tile ``t``'s copies if it exists, else an empty group: every loop step commits one group, so ``_landed``'s
    count of newer groups holds to the end."""
    if t < n_tiles:
        _issue_tile(src, k_ring, v_ring, t, BLOCK_N, HEAD_D, PAGE, STAGES, LD)
    else:
        async_copy.commit_group()


@gluon.jit
def _landed(NEWER: gl.constexpr):
    """Every copy group but the ``NEWER`` newest has landed, for every thread, and is visible to the MMAs (each
    thread's copies fenced for the async proxy the MMAs read through, then a CTA barrier)."""
    async_copy.wait_group(NEWER)
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _softmax(s, m_i, l_i, t, mask_src, scale_log2, BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr,
             P_LAYOUT: gl.constexpr):  # fmt: skip
    """Tile ``t``'s scores ``s`` into the running max and sum: (P in the MMA operand layout, max, sum, alpha), where
    the accumulator must be multiplied by ``alpha`` before P.V is added. ``mask_src``: (full_end, each row's position,
    kv_end); tiles from ``full_end`` on are masked (causal and length)."""
    full_end, rows_pos, kv_end = mask_src
    if t >= full_end:
        pos = t * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
        keep = (gl.expand_dims(pos, 0) <= gl.expand_dims(rows_pos, 1)) & gl.expand_dims(pos < kv_end, 0)
        s = gl.where(keep, s * scale_log2, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1) * scale_log2)
        p = gl.exp2(s * scale_log2 - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return gl.convert_layout(p.to(gl.bfloat16), P_LAYOUT), m_new, l_i, alpha


@gluon.jit
def _rescale(acc, alpha, O_LAYOUT: gl.constexpr):
    return acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)


@gluon.jit
def _loop_overlapped(q_smem, k_ring, v_ring, src, n_tiles, mask_src, scale_log2, acc, m_i, l_i, s_zero,
                     BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, PAGE: gl.constexpr, STAGES: gl.constexpr,
                     LD: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                     P_LAYOUT: gl.constexpr):  # fmt: skip
    """FlashAttention-3's order: tile t+1's Q.K^T and tile t's P.V issued together, tile t+1's softmax computed while
    P.V may still run (``wgmma.wait_group 1``), then the accumulator rescaled. Tiles t and t+1 are in use, so the ring
    prefetches ``STAGES - 2`` tiles beyond them."""
    _landed(STAGES - 1)  # tile 0
    s = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), s_zero, use_acc=False)
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, 0, mask_src, scale_log2, BLOCK_N, S_LAYOUT, P_LAYOUT)
    for t in range(0, n_tiles - 1):
        _landed(STAGES - 2)  # tile t+1
        s_tok = warpgroup_mma(q_smem, k_ring.index((t + 1) % STAGES).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
        acc_tok = warpgroup_mma(p, v_ring.index(t % STAGES), warpgroup_mma_init(acc), is_async=True)
        s = warpgroup_mma_wait(1, deps=(s_tok,))  # tile t+1's scores; tile t's P.V may still run
        p_next, m_i, l_i, alpha = _softmax(s, m_i, l_i, t + 1, mask_src, scale_log2, BLOCK_N, S_LAYOUT, P_LAYOUT)
        acc, p = warpgroup_mma_wait(0, deps=(acc_tok, p))
        acc = _rescale(acc, alpha, O_LAYOUT)
        p = p_next
        gl.thread_barrier()  # both warpgroups are done with tile t's slot
        _refill(src, k_ring, v_ring, t + STAGES, n_tiles, BLOCK_N, HEAD_D, PAGE, STAGES, LD)
    last = warpgroup_mma(p, v_ring.index((n_tiles - 1) % STAGES), warpgroup_mma_init(acc), is_async=True)
    acc, p = warpgroup_mma_wait(0, deps=(last, p))
    return acc, l_i


@gluon.jit
def _loop_plain(q_smem, k_ring, v_ring, src, n_tiles, mask_src, scale_log2, acc, m_i, l_i, s_zero,
                BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, PAGE: gl.constexpr, STAGES: gl.constexpr,
                LD: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr,
                P_LAYOUT: gl.constexpr):  # fmt: skip
    """The baseline: each tile's Q.K^T, softmax and P.V one after another; the ring prefetches ``STAGES - 1`` tiles
    beyond the one in use."""
    for t in range(0, n_tiles):
        _landed(STAGES - 1)  # tile t
        s = warpgroup_mma(q_smem, k_ring.index(t % STAGES).permute((1, 0)), s_zero, use_acc=False)
        p, m_i, l_i, alpha = _softmax(s, m_i, l_i, t, mask_src, scale_log2, BLOCK_N, S_LAYOUT, P_LAYOUT)
        acc_tok = warpgroup_mma(p, v_ring.index(t % STAGES), warpgroup_mma_init(_rescale(acc, alpha, O_LAYOUT)),
                                is_async=True)  # fmt: skip
        acc, p = warpgroup_mma_wait(0, deps=(acc_tok, p))
        gl.thread_barrier()  # both warpgroups are done with tile t's slot
        _refill(src, k_ring, v_ring, t + STAGES, n_tiles, BLOCK_N, HEAD_D, PAGE, STAGES, LD)
    return acc, l_i


@gluon.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, out_ptr, prefix, q_len, scale_log2, stride_qt, stride_qh, stride_kb,
                    stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_ot, stride_oh,
                    HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP: gl.constexpr,
                    PAGE: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                    num_warps: gl.constexpr):  # fmt: skip
    """The ring holds tile t in slot t % STAGES and refills a slot once its tile's P.V has been waited for and both
    warpgroups have passed a barrier. No MMA result is in flight across a loop's back edge: ptxas serializes every MMA
    of a loop that carries one (its warnings C7514-C7517), which ``compile_only`` checks."""
    BLOCK_Q: gl.constexpr = BLOCK_M // GROUP
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    O_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_D, 16]
    )
    P_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    LD: gl.constexpr = gl.BlockedLayout([1, 8], [256 // HEAD_D, HEAD_D // 8], [num_warps, 1], [1, 0])
    SMEM: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

    kv_head = gl.program_id(1)
    qtile = gl.cdiv(q_len, BLOCK_Q) - 1 - gl.program_id(0)  # the longest tiles first
    first_pos = prefix + qtile * BLOCK_Q
    kv_end = gl.minimum(prefix + q_len, first_pos + BLOCK_Q)
    n_tiles = gl.cdiv(kv_end, BLOCK_N)

    # Q: (token, head of the group) rows, to shared memory for the Q.K^T MMAs
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LD))
    tok = qtile * BLOCK_Q + rows // GROUP
    q_rows = tok.to(gl.int64) * stride_qt + (kv_head * GROUP + rows % GROUP) * stride_qh
    d = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, LD))
    q_ok = gl.expand_dims(tok < q_len, 1)
    q = gl.load(q_ptr + gl.expand_dims(q_rows, 1) + gl.expand_dims(d, 0), mask=q_ok, other=0.0)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, HEAD_D], SMEM, q)
    k_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], SMEM)
    v_ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], SMEM)

    src = (k_ptr, v_ptr, bt_ptr, kv_head, kv_end, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh)
    for t in gl.static_range(STAGES):
        _refill(src, k_ring, v_ring, t, n_tiles, BLOCK_N, HEAD_D, PAGE, STAGES, LD)
    rows_pos = first_pos + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, S_LAYOUT)) // GROUP
    mask_src = ((first_pos + 1) // BLOCK_N, rows_pos, kv_end)  # tiles below the first need no mask
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, O_LAYOUT)
    m_i = gl.full([BLOCK_M], -1.0e30, gl.float32, gl.SliceLayout(1, S_LAYOUT))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, S_LAYOUT))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    if OVERLAP:
        acc, l_i = _loop_overlapped(q_smem, k_ring, v_ring, src, n_tiles, mask_src, scale_log2, acc, m_i, l_i, s_zero,
                                    BLOCK_N, HEAD_D, PAGE, STAGES, LD, S_LAYOUT, O_LAYOUT, P_LAYOUT)  # fmt: skip
    else:
        acc, l_i = _loop_plain(q_smem, k_ring, v_ring, src, n_tiles, mask_src, scale_log2, acc, m_i, l_i, s_zero,
                               BLOCK_N, HEAD_D, PAGE, STAGES, LD, S_LAYOUT, O_LAYOUT, P_LAYOUT)  # fmt: skip
    async_copy.wait_group(0)

    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT)), 1)
    o_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, O_LAYOUT))
    o_tok = qtile * BLOCK_Q + o_rows // GROUP
    o_head = kv_head * GROUP + o_rows % GROUP
    o_d = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, O_LAYOUT))
    o_off = gl.expand_dims(o_tok.to(gl.int64) * stride_ot + o_head * stride_oh, 1) + gl.expand_dims(o_d, 0)
    gl.store(out_ptr + o_off, out.to(gl.bfloat16), mask=gl.expand_dims(o_tok < q_len, 1))


#: (BLOCK_N, tiles prefetched beyond those in use) of each A/B: the plain loop uses one tile at a time and the
#: overlapped loop two, so at the same prefetch depth the overlapped loop's ring has one slot more (``slots``).
CONFIGS = ((64, 1), (64, 2), (128, 1))


def slots(ahead: int, overlap: bool) -> int:
    """Ring slots (the kernel's STAGES) for ``ahead`` tiles prefetched beyond those the loop is using."""
    return ahead + (2 if overlap else 1)


def compile_only(block_n: int, stages: int, overlap: bool, group: int = 4, head: int = 128, warps: int = 8) -> dict:
    """The kernel compiled for SM 9.0 without a GPU: ``smem`` (bytes), ``regs`` and ``stack`` (spill bytes) per
    thread (compiled_buffers.describe), ptxas's serialization warnings and the warpgroup MMAs and waits in the machine
    code (``_machine_code``), and the order of the ops in each PTX loop (wgmma_waits.ptx_loops)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    const = dict(HEAD_D=head, BLOCK_M=128, BLOCK_N=block_n, GROUP=group, PAGE=16, STAGES=stages, OVERLAP=overlap,
                 num_warps=warps)  # fmt: skip
    compiled = cb.compile_kernel(_prefill_kernel, const, warps=warps, stages=stages, source=GluonASTSource)
    usage = {k: v for k, v in cb.describe(compiled).items() if k in ("smem", "regs", "stack")}
    return {**usage, **_machine_code(compiled), "ptx_loops": ptx_loops(compiled.asm["ptx"])}


def _machine_code(compiled) -> dict:  # noqa: ANN001
    """What ptxas made of the MMAs: its warnings that it serialized them (C7514-C7517: an MMA waited for right after
    it is issued), and the warpgroup MMA instructions (HGMMA) and waits (WARPGROUP.DEPBAR) in the machine code."""
    import subprocess
    import tempfile

    import triton

    tools = Path(triton.__file__).parent / "backends/nvidia/bin"
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_text(compiled.asm["ptx"])
        cmd = [str(tools / "ptxas"), "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(Path(tmp) / "x.cubin")]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"ptxas failed: {run.stderr[-500:]}")
        cubin.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True).stdout
    warnings = sorted(set(re.findall(r"\(C751[4-7]\)", run.stderr)))
    return {"serialized": warnings, "hgmma": sass.count("HGMMA"), "depbar": sass.count("WARPGROUP.DEPBAR")}


def gluon_prefill(q, k_cache, v_cache, block_table_row, prefix: int, out, *, softmax_scale: float, block_n: int,
                  stages: int, overlap: bool, warps: int = 8) -> None:  # fmt: skip
    """One request's causal chunk ``q`` [q_len, heads, D] after ``prefix`` cached tokens, over NHD caches
    [blocks, page, kv_heads, D], into ``out``."""
    import math

    import torch

    q_len, heads, head = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    if heads % kv_heads or 128 % group or head not in (64, 128, 256):
        raise ValueError(f"{heads} query / {kv_heads} KV heads of {head}: needs a group dividing 128, head 64-256")
    if {q.dtype, k_cache.dtype, v_cache.dtype, out.dtype} != {torch.bfloat16}:
        raise ValueError("bf16 only")
    if any(x.stride(-1) != 1 for x in (q, k_cache, v_cache, out)):
        raise ValueError("the head dimension must be contiguous")
    grid = (-(-q_len // (128 // group)), kv_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_table_row, out, prefix, q_len, softmax_scale / math.log(2), q.stride(0),
        q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), out.stride(0), out.stride(1), HEAD_D=head, BLOCK_M=128, BLOCK_N=block_n, GROUP=group,
        PAGE=k_cache.shape[1], STAGES=stages, OVERLAP=overlap, num_warps=warps,
    )  # fmt: skip


def _variants(inputs: dict, prefix: int, chunk: int, out, scale: float) -> dict:  # noqa: ANN001
    """TRITON_ATTN's auto config and, per (BLOCK_N, prefetch depth) of ``CONFIGS``, the Gluon kernel's plain and
    overlapped loops, on the same inputs."""
    from hwtune.kernels.triton_attention import paged_attention

    q, k, v, table = inputs["q"], inputs["kv"][:, 0], inputs["kv"][:, 1], inputs["block_table"]
    variants = {
        "triton_attn_auto": functools.partial(
            paged_attention,
            q,
            k,
            v,
            table,
            inputs["seq_lens"],
            inputs["qsl"],
            max_query_len=chunk,
            max_seq_len=prefix + chunk,
            out=out,
            softmax_scale=scale,
        )  # fmt: skip
    }
    for block_n, ahead in CONFIGS:
        for overlap in (False, True):
            name = f"gluon_n{block_n}_ahead{ahead}_{'overlap' if overlap else 'plain'}"
            variants[name] = functools.partial(
                gluon_prefill, q, k, v, table[0], prefix, out, softmax_scale=scale, block_n=block_n,
                stages=slots(ahead, overlap), overlap=overlap,
            )  # fmt: skip
    return variants


def _error(out, ref) -> float:  # noqa: ANN001
    """The largest error over TRITON_ATTN's bf16 tolerance (tests/kernels/cases.py); over 1 fails, NaN counts as inf."""
    atol, rtol = 1.5e-2, 2e-2
    return ((out.float() - ref).abs() / (atol + rtol * ref.abs())).nan_to_num(float("inf")).max().item()


class GpuUnusable(RuntimeError):
    """A variant's fault left the CUDA context unusable: nothing after it can run in this process."""


def _check_and_time(fn, out, ref) -> dict:  # noqa: ANN001
    """The variant's output against the reference; if it passed, its graph captured, ``out`` poisoned, the graph's
    median timed with the L2 flushed (every output then comes from a replay), and the output checked again. A
    variant that fails to compile or launch is reported; one that leaves the GPU unusable raises ``GpuUnusable``."""
    import torch

    from hwtune.probes.timing import TimingOptions, capture_graph, time_cuda

    try:
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = _error(out, ref)
        if err > 1.0:
            return {"error/tolerance": round(err, 4), "status": "wrong"}
        graph = capture_graph(fn)
        out.fill_(float("nan"))
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        stats, _ = time_cuda(fn, l2_bytes=l2, opts=TimingOptions(time_cap_s=0.5), graph=graph)
        after = _error(out, ref)
        status = "ok" if after <= 1.0 else "wrong after the timed replays"
        return {"error/tolerance": round(max(err, after), 4), "status": status, "median_us": round(stats.median_us, 2)}
    except Exception as exc:
        try:
            torch.cuda.synchronize()
        except Exception as broken:
            raise GpuUnusable(f"{type(exc).__name__}: {str(exc)[:300]}") from broken
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}


def run_gpu(out_path: Path | None) -> None:
    """Every problem (bf16, head 128, 16-token pages, shuffled, NaN past the context): each variant checked against
    the float32 reference, then timed. Each line is written as it is measured; a fault that leaves the GPU unusable
    ends the run with a line saying so."""
    import torch

    from tests.kernels.cases import Problem, build
    from tests.kernels.reference import paged_attention_ref

    sink = out_path.open("w") if out_path else None

    def emit(line: dict) -> None:
        print(json.dumps(line), flush=True)
        if sink:
            sink.write(json.dumps(line) + "\n")
            sink.flush()

    try:
        for model, hq, hkv, chunk, prefix in PROBLEMS:
            where = {"model": model, "q_heads": hq, "kv_heads": hkv, "chunk": chunk, "prefix": prefix}
            prob = Problem(q_lens=(chunk,), seq_lens=(prefix + chunk,), num_heads=hq, num_kv_heads=hkv,
                           head_size=128, poison_tail=True)  # fmt: skip
            inputs = build(prob, "cuda")
            scale = 128**-0.5
            ref, _ = paged_attention_ref(inputs["q"], inputs["kv"][:, 0], inputs["kv"][:, 1], inputs["block_table"],
                                         inputs["seq_lens"], inputs["qsl"], softmax_scale=scale)  # fmt: skip
            out = torch.empty_like(inputs["q"])
            for name, fn in _variants(inputs, prefix, chunk, out, scale).items():
                emit({**where, "variant": name, **_check_and_time(fn, out, ref)})
            del ref, inputs, out
            torch.cuda.empty_cache()
    except Exception as exc:  # GpuUnusable, or the next problem's setup on a broken context: what ran is kept
        emit({"status": f"run stopped: {type(exc).__name__}: {str(exc)[:300]}"})
    finally:
        if sink:
            sink.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile-only", action="store_true", help="compile for SM 9.0 on this machine, no GPU")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not args.compile_only:
        run_gpu(args.out)
        return 0
    serialized = False
    for block_n, ahead in CONFIGS:
        for overlap in (False, True):
            stages = slots(ahead, overlap)
            found = compile_only(block_n, stages, overlap)
            serialized |= bool(found["serialized"])
            line = {"block_n": block_n, "ahead": ahead, "overlap": overlap, "stages": stages, **found}
            print(json.dumps(line), flush=True)
    if serialized:
        print(
            "ptxas serialized the warpgroup MMAs of a config above: its timing would measure nothing", file=sys.stderr
        )
    return 1 if serialized else 0


if __name__ == "__main__":
    raise SystemExit(main())
