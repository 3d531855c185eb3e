"""How hwtune's Triton kernels compile for a GPU, without one: shared memory, registers, spills and the software
pipeline's buffers per config, from Triton's compiler on a CPU (its bundled ptxas and cuobjdump).

Why: Triton's software pipeliner divides a loop's ``num_stages`` between the levels of loads that feed each other's
addresses (a block-table load feeding the KV loads), so a config's stage count does not say how many KV tiles it has
in flight; the compiled kernel does (its ``local_alloc``s: a ``2x64x128xbf16`` buffer holds two 64 x 128 tiles). This
found that the MLA kernel's 32-position TMA configs hold one latent buffer at 2-4 stages, two at 6 and three at 8
(docs/kernels.md "Deeper TMA pipelines"), and that TRITON_ATTN's decode configs hold one K and one V buffer at 2-4
stages and two at 5 and 6.

Each line: the kernel, the config, and ``smem`` (bytes), ``regs`` and ``stack`` (bytes of spills) per thread,
``cp_async`` and ``tma`` (copy instructions in the PTX) and ``buffers``: each mutable shared-memory allocation's shape
(its first dimension is the pipeline depth) with the number of allocations of that shape, one per pipelined loop (the
MLA kernel has two loops, unmasked and masked tiles, hence ``"2x32x512xbf16": 2``). Pointers and strides are compiled
divisible by 16, as the JIT specialises them at run time, so gathers vectorise and pipeline as on the GPU; other
integers stay generic, where the JIT would also specialise those equal to 1 or divisible by 16 (buffers and shared
memory come out the same; registers may differ by one or two). The Triton installed decides the result: compare with
the device's version (3.6.0 in docs/).

    python benchmarks/experiments/compiled_buffers.py mla N_POSITIONS,SPLITS,WARPS,STAGES[,tma] ... [--page 64]
    python benchmarks/experiments/compiled_buffers.py attn N_POSITIONS,SPLITS,WARPS,STAGES ... [--batch 32]
        [--query-len 1] [--group 8] [--head 128] [--page 16]

``mla``: DeepSeek-V3 at TP 8 (16 heads a program, latent 512 + rope 64, bf16; ``--page`` only). ``attn``: TRITON_ATTN
with one KV head, ``--group`` query heads on it, ``--query-len`` tokens a request (up to 16: a decode-style launch), 700
tokens of context, gathered tiles.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
SCALARS = {"scale_log2": "fp32", "kv_scale": "fp32", "v_scale": "fp32"}
INT_POINTERS = ("bt_ptr", "seq_lens_ptr", "qsl_ptr", "counters_ptr")
FP32_POINTERS = ("lse_ptr", "part_o_ptr", "part_lse_ptr")
NOT_DIVISIBLE = {"stride_bt", "stride_lh"}  # the block table's row and an LSE head stride of 1


def compile_kernel(kernel, const: dict, *, warps: int, stages: int, descriptors: dict | None = None, source=ASTSource):  # noqa: ANN001, ANN201
    """One Triton kernel compiled for SM 9.0 with ``const`` as its constexprs (every other argument a pointer, an
    fp32 scalar or an int, as named); ``source``: Gluon's ``GluonASTSource`` for a Gluon kernel."""
    names = kernel.arg_names
    sig = {}
    for n in names:
        if n in const:
            sig[n] = "constexpr"
        elif descriptors and n in descriptors:
            sig[n] = descriptors[n]
        elif n.endswith("_ptr") or n.startswith("desc_"):
            sig[n] = "*i32" if n in INT_POINTERS else "*fp32" if n in FP32_POINTERS else "*bf16"
        else:
            sig[n] = SCALARS.get(n, "i32")
    divisible = [
        i for i, n in enumerate(names) if sig[n].startswith("*") or (n.startswith("stride_") and n not in NOT_DIVISIBLE)
    ]
    src = source(
        fn=kernel, signature=sig, constexprs={(i,): const[n] for i, n in enumerate(names) if n in const},
        attrs={(i,): [["tt.divisibility", 16]] for i in divisible},
    )  # fmt: skip
    return triton.compile(src, target=TARGET, options=dict(num_warps=warps, num_stages=stages))


def describe(compiled) -> dict:  # noqa: ANN001
    """Shared memory, registers, spills, copy instructions and pipeline buffers of one compiled kernel."""
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    regs = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    buffers = collections.Counter(re.findall(r"local_alloc[^\n]*?memdesc<([0-9x]+x\w+), #[^\n]*mutable", ttgir))
    return {
        "smem": compiled.metadata.shared, "regs": int(regs.group(1)) if regs else None,
        "stack": int(regs.group(2)) if regs else None, "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        "tma": ptx.count("cp.async.bulk.tensor"), "buffers": dict(buffers),
    }  # fmt: skip


def mla_config(block_n: int, splits: int, tma: bool, page: int) -> tuple:
    """The MLA kernel and its constexprs at DeepSeek-V3 TP 8 (16 heads a program; TMA descriptors where ``tma``)."""
    from hwtune.kernels import triton_mla

    const = dict(LORA=512, ROPE=64, BLOCK_H=16, BLOCK_T=1, BLOCK_N=block_n, PAGE_SIZE=page, CAUSAL=True,
                 SPLIT=splits > 1, WRITE_LSE=False, F16_DOTS=False, TMA=tma, PDL=splits > 1)  # fmt: skip
    descs = {"desc_ckv": f"tensordesc<bf16[{block_n}, 512]>", "desc_kpe": f"tensordesc<bf16[{block_n}, 64]>"}
    return triton_mla._mla_decode_kernel, const, descs if tma else None


def attn_config(block_n: int, splits: int, warps: int, stages: int, args: argparse.Namespace) -> tuple:
    """TRITON_ATTN's kernel and its constexprs as ``paged_attention`` plans the launch on an SM 9.0 GPU (gathers)."""
    from hwtune.kernels import triton_attention
    from hwtune.kernels._common import plan_launch
    from hwtune.kernels.configs import TritonAttnConfig, is_decode_shape
    from hwtune.kernels.page_chunks import bt_chunk
    from hwtune.kernels.split_kv import merges_in_kernel

    config = TritonAttnConfig(block_n=block_n, num_splits=splits, num_warps=warps, num_stages=stages)
    plan = plan_launch(
        config, num_tokens=args.batch * args.query_len, batch=args.batch, max_query_len=args.query_len,
        head_size=args.head, gqa_group=args.group, l2=60 << 20, kv_bytes_per_request=4 * 700 * args.head,
    )  # fmt: skip
    prefill_style = not is_decode_shape(args.query_len)
    tiles, entries = bt_chunk(
        prefill_style=prefill_style, page_size=args.page, block_n=plan.block_n, tma=False, num_stages=stages
    )
    merge_here = plan.num_splits > 1 and merges_in_kernel(plan, args.query_len, 1)
    const = dict(HEAD_D=args.head, BLOCK_D=args.head, BLOCK_M=plan.block_m, BLOCK_Q=plan.block_q,
                 BLOCK_N=plan.block_n, GROUP=args.group, PAGE_SIZE=args.page, ONE_PER_REQ=plan.one_per_req,
                 HEADS_FAST=plan.heads_fast, SPLIT=plan.num_splits > 1, WRITE_LSE=False, F16_DOTS=False, TMA=False,
                 MERGE_HERE=merge_here, BT_CHUNK=tiles, BT_PAGES=entries,
                 PDL=plan.num_splits > 1 and not merge_here and not prefill_style)  # fmt: skip
    return triton_attention._paged_attn_kernel, const, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=("mla", "attn"))
    ap.add_argument("configs", nargs="+", help="N_POSITIONS,SPLITS,WARPS,STAGES[,tma]")
    ap.add_argument("--page", type=int, default=None, help="page size (mla: 64, attn: 16)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--query-len", type=int, default=1)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--head", type=int, default=128)
    args = ap.parse_args()
    for text in args.configs:
        fields = text.split(",")
        try:
            block_n, splits, warps, stages = (int(v) for v in fields[:4])
        except ValueError:
            ap.error(f"a config is N_POSITIONS,SPLITS,WARPS,STAGES[,tma], got {text!r}")
        if fields[4:] not in ([], ["tma"]) or (fields[4:] and args.kernel == "attn"):
            ap.error(f"the only option after STAGES is tma, for mla; got {text!r}")
        tma = fields[4:] == ["tma"]
        if args.kernel == "mla":
            kernel, const, descs = mla_config(block_n, splits, tma, args.page or 64)
        else:
            args.page = args.page or 16
            kernel, const, descs = attn_config(block_n, splits, warps, stages, args)
        compiled = compile_kernel(kernel, const, warps=warps, stages=stages, descriptors=descs)
        line = {"kernel": args.kernel, "config": text, "triton": triton.__version__, **describe(compiled)}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
