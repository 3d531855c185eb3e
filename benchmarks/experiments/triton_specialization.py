"""How much of HWTUNE_TRITON_ATTN's per-workload time in a tune is Triton compiling variants that differ only in how
Triton specialised shape-dependent integer arguments (issue 17: the default tune with every backend must fit 10
minutes; on an H100, 2026-11-27, the ``tuned`` search took 1.4-49 s per workload, mostly compiles).

Triton specialises every integer argument on ``== 1`` and on divisibility by 16, so a batch of 1, 16 or 5, a split
count and the block table's row stride (pages per request) each select a separate compiled kernel for every config.
For each variant, in a fresh process with an empty Triton cache, the ``tuned`` search (and ``auto``) runs over a
sequence of Llama-3.1-8B workloads (bf16, page 16, NHD) like a plan's, then the same sequence again:

- ``specialized``: the paged-attention and merge kernels re-wrapped with plain ``triton.jit`` (every integer argument
  specialised, as before 2026-11-27);
- ``generic``: the kernels re-wrapped with ``do_not_specialize`` for ``GENERIC_ATTN`` / ``GENERIC_MERGE``, the lists
  of the run of 2026-11-27 (hwtune's kernels now leave ``kernels._common.WORKLOAD_INTS`` unspecialised, a subset:
  the split scratch's head and element strides, fixed per spec, stay specialised).

Printed per workload: the wall time of the search, the chosen config and its searched median (us), so that both the
time saved and any kernel slowdown from losing the specialisation show.

    python benchmarks/experiments/triton_specialization.py [variant ...]     (needs a CUDA GPU)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DECODE = [("decode", b, c, 1) for b in (1, 16, 256) for c in (512, 8192, 131072) if b * c <= 16 * 131072]
DECODE += [("decode", 4, 2048, 1), ("decode", 48, 3000, 1), ("decode", 5, 700, 1)]
PREFILL = [("prefill", 1, p + q, q) for q in (128, 512, 2048) for p in (0, 32768)] + [("prefill", 1, 5000 + 300, 300)]
GENERIC_ATTN = ["batch", "num_splits", "stride_bt", "stride_ps", "stride_pt", "stride_ph"]
GENERIC_MERGE = ["batch", "num_splits", "stride_ps", "stride_pt", "stride_ph", "stride_ot", "stride_lt"]


def _rewrap(attn: list[str], merge: list[str]) -> None:
    """Replace the paged-attention and merge kernels by JIT functions that leave ``attn`` / ``merge`` unspecialised."""
    import triton

    from hwtune.kernels import split_kv, triton_attention

    k = triton_attention._paged_attn_kernel
    triton_attention._paged_attn_kernel = triton.jit(do_not_specialize=attn)(k.fn)
    m = split_kv._merge_kernel
    split_kv._merge_kernel = triton.jit(do_not_specialize=merge)(m.fn)


def child(variant: str) -> None:
    import torch

    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.probes.attention.candidates.triton_attn import TritonAttnRunner
    from hwtune.probes.attention.problem import build_problem

    if variant == "generic":
        _rewrap(GENERIC_ATTN, GENERIC_MERGE)
    else:
        _rewrap([], [])
    spec = AttentionSpec(32, 8, 128, dtype="bfloat16", block_size=16, kv_layout="NHD")
    again = DECODE[:4] + PREFILL[:2]  # the second sweep: what a later workload of a seen class pays
    for sweep, shapes in ((1, DECODE + PREFILL), (2, again)):
        for phase, b, c, q in shapes:
            w = AttentionWorkload(spec=spec, phase=phase, batch=b, context_len=c, query_len=q)
            p = build_problem(w, "cuda", seed=0)
            row = {"variant": variant, "sweep": sweep, "shape": f"{phase} b{b} c{c} q{q}"}
            for tactic in ("auto", "tuned"):
                r = TritonAttnRunner(tactic)
                torch.cuda.synchronize()
                t = time.perf_counter()
                r.prepare(p)
                r.run()
                torch.cuda.synchronize()
                row[f"{tactic}_s"] = round(time.perf_counter() - t, 2)
                if tactic == "tuned":
                    row["config"] = r.extra.get("config")
                    row["best_us"] = min(r.extra.get("searched_us", {}).values(), default=None)
            print(json.dumps(row), flush=True)
            del p
            torch.cuda.empty_cache()


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    variants = sys.argv[1:] or ["specialized", "generic"]
    for v in variants:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            t = time.time()
            limit = os.environ.get("VARIANT_TIMEOUT_S")
            try:
                subprocess.run(
                    [sys.executable, __file__, "--child", v],
                    env=env,
                    check=False,
                    timeout=float(limit) if limit else None,
                )
            except subprocess.TimeoutExpired:
                print(json.dumps({"variant": v, "timed_out_s": float(limit)}), flush=True)
            print(json.dumps({"variant": v, "total_s": round(time.time() - t, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
