"""Where Triton's compiler waits for each tensor-core MMA in TRITON_ATTN's prefill loop, on a CPU: whether a tile's
softmax can overlap any MMA.

Why: FlashAttention-3 issues the next tile's Q.K^T warpgroup MMA before the current tile's softmax and waits for it
after (and ping-pongs two warpgroups), so the tensor cores work while the special-function and FMA units compute the
exponentials. Triton 3.6 makes a ``tl.dot`` truly asynchronous only where its result feeds nothing but the same dot's
accumulator in the next iteration (the P.V dot); any other dot is followed by a wait for every MMA in flight. This
script compiles the kernels for SM 9.0 and lists, loop by loop, the order of the ops that matter: cp.async waits
(``async_wait``), MMAs (``dot``), MMA waits (``dot_wait`` with the number of MMAs it lets stay in flight) and the
exponentials (``exp2``), and the same loops in the PTX (``ptx_loops``: cp.async waits, CTA barriers, ``wgmma``
instructions, their waits and ``ex2`` instructions). Three kernels:

- ``attn``: TRITON_ATTN's prefill launch as ``paged_attention`` plans it on an SM 9.0 GPU (the auto prefill config of
  head 128: 128 x 128 tiles, 8 warps, 3 stages, gathers over 16-token pages, block table read in chunks);
- ``mini``: a plain online-softmax loop (one Q tile, contiguous K/V), written as TRITON_ATTN's loop is;
- ``mini_pipelined``: the same loop software-pipelined by hand as FlashAttention-3's is (tile j+1's Q.K^T issued before
  tile j's softmax), to see whether the compiler keeps that MMA in flight across the softmax.

    python benchmarks/experiments/wgmma_waits.py [--out FILE.jsonl]   (no GPU needed; Triton decides: 3.6.0 in docs/)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

import compiled_buffers as cb  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def _softmax_pv(qk, m_i, l_i, acc, v, scale):
    m_new = tl.maximum(m_i, tl.max(qk, 1) * scale)
    p = tl.exp2(qk * scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(tl.bfloat16), v, acc=acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _mini(q_ptr, k_ptr, v_ptr, o_ptr, n, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    rm, rn, rd = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    acc, m_i, l_i = tl.zeros([BM, D], tl.float32), tl.full([BM], -1e30, tl.float32), tl.zeros([BM], tl.float32)
    for j in range(0, n):
        k = tl.load(k_ptr + (j * BN + rn)[:, None] * D + rd[None, :])
        v = tl.load(v_ptr + (j * BN + rn)[:, None] * D + rd[None, :])
        m_i, l_i, acc = _softmax_pv(tl.dot(q, tl.trans(k)), m_i, l_i, acc, v, scale)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


@triton.jit
def _mini_pipelined(q_ptr, k_ptr, v_ptr, o_ptr, n, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    rm, rn, rd = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    acc, m_i, l_i = tl.zeros([BM, D], tl.float32), tl.full([BM], -1e30, tl.float32), tl.zeros([BM], tl.float32)
    qk = tl.dot(q, tl.trans(tl.load(k_ptr + rn[:, None] * D + rd[None, :])))
    for j in range(1, n):
        k = tl.load(k_ptr + (j * BN + rn)[:, None] * D + rd[None, :])
        v = tl.load(v_ptr + ((j - 1) * BN + rn)[:, None] * D + rd[None, :])
        qk_next = tl.dot(q, tl.trans(k))  # tile j's scores, issued before tile j-1's softmax
        m_i, l_i, acc = _softmax_pv(qk, m_i, l_i, acc, v, scale)
        qk = qk_next
    v = tl.load(v_ptr + ((n - 1) * BN + rn)[:, None] * D + rd[None, :])
    m_i, l_i, acc = _softmax_pv(qk, m_i, l_i, acc, v, scale)
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


def compile_attn_prefill():  # noqa: ANN201
    """TRITON_ATTN's prefill launch compiled for SM 9.0 as ``paged_attention`` plans it (the auto config of head 128:
    128 x 128 tiles, 8 warps, 3 stages, gathers over 16-token pages, the block table read in chunks)."""
    attn = argparse.Namespace(batch=1, query_len=4096, group=4, head=128, page=16)
    kernel, const, descs = cb.attn_config(128, 1, 8, 3, attn)
    return cb.compile_kernel(kernel, const, warps=8, stages=3, descriptors=descs)


def compile_mini(fn, warps: int = 8, stages: int = 3):  # noqa: ANN001, ANN201
    """A mini kernel compiled for SM 9.0: 128 x 128 tiles, head 128, bf16. (The pipelined one needs 262144 bytes of
    shared memory at 3 stages, more than SM 9.0 has: it shows where the compiler waits, it would not launch.)"""
    sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32", "n": "i32", "scale": "fp32",
           "BM": "constexpr", "BN": "constexpr", "D": "constexpr"}  # fmt: skip
    src = ASTSource(
        fn=fn, signature=sig, constexprs={(6,): 128, (7,): 128, (8,): 128},
        attrs={(i,): [["tt.divisibility", 16]] for i in range(4)},
    )  # fmt: skip
    return triton.compile(src, target=cb.TARGET, options=dict(num_warps=warps, num_stages=stages))


def loop_ops(ttgir: str) -> list[list[str]]:
    """Per innermost ``scf.for`` holding an MMA: its MMAs, MMA waits, cp.async waits and exponentials, in order. A loop
    ends at the ``scf.yield`` indented one level under its ``scf.for`` (a nested ``scf.if`` yields deeper)."""
    loops, stack = [], []  # stack: (indent of the scf.for line, its ops)
    for line in ttgir.splitlines():
        indent = len(line) - len(line.lstrip())
        if "scf.for" in line:
            stack.append((indent, []))
        elif stack and re.match(r"\s*scf\.yield", line) and indent == stack[-1][0] + 2:
            ops = stack.pop()[1]
            if any(op.startswith("dot(") for op in ops):
                loops.append(ops)
        elif stack:
            ops = stack[-1][1]
            if "ttng.warp_group_dot_wait" in line:
                pendings = re.search(r"pendings = (\d+)", line).group(1)
                ops.append(f"dot_wait(pendings={pendings})")
            elif "ttng.warp_group_dot " in line:
                ops.append("dot(async)" if "isAsync = true" in line else "dot(sync)")
            elif "ttg.async_wait" in line:
                ops.append("async_wait")
            elif "math.exp2" in line and re.search(r"tensor<\d+x\d+x", line):
                ops.append("exp2")
    return loops


def ptx_loops(ptx: str) -> list[list[str]]:
    """Per PTX loop holding a warpgroup MMA (a label branched back to): its cp.async waits, CTA barriers, MMAs, MMA
    waits and exponentials in order, runs of one op collapsed (``wgmma x8``)."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"(\$L__BB\d+_\d+):", line))}
    pats = [("cp.async.wait_group", "cp_async_wait"), ("bar.sync", "barrier"), ("wgmma.mma_async", "wgmma"),
            ("wgmma.wait_group", "wgmma_wait"), ("ex2.approx", "ex2")]  # fmt: skip
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if not m or m.group(1) not in labels or labels[m.group(1)] > i:
            continue
        ops: list[list] = []
        for body in lines[labels[m.group(1)] : i]:
            for pat, name in pats:
                if pat in body:
                    arg = re.search(r"wait_group(?:\.sync\.aligned)?\s+(\d+)", body)
                    tag = f"{name}({arg.group(1)})" if arg else name
                    if ops and ops[-1][0] == tag:
                        ops[-1][1] += 1
                    else:
                        ops.append([tag, 1])
        if any(tag == "wgmma" for tag, _ in ops):
            loops.append([tag if n == 1 else f"{tag} x{n}" for tag, n in ops])
    return loops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    compiled = {
        "attn": compile_attn_prefill(),
        "mini": compile_mini(_mini),
        "mini_pipelined": compile_mini(_mini_pipelined),
    }
    lines = []
    for name, c in compiled.items():
        line = {"kernel": name, "triton": triton.__version__, "loops": loop_ops(c.asm["ttgir"]),
                "ptx_loops": ptx_loops(c.asm["ptx"]),
                **{k: v for k, v in cb.describe(c).items() if k in ("regs", "stack", "smem")}}  # fmt: skip
        lines.append(line)
        print(json.dumps(line), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
