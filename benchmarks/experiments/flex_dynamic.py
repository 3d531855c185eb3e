"""FLEX_ATTENTION compiled with dynamic shapes against one compile per shape (issue 17: the default tune with every
backend must fit 10 minutes; FLEX's torch.compile per shape was 29 of the estimated 42).

vLLM compiles ``flex_attention`` once with ``torch.compile(flex_attention, fullgraph=True)`` (automatic dynamic: the
second distinct shape recompiles with dynamic sizes, and that kernel then serves every later shape), so an engine
runs a dynamic-shape flex kernel. For each shape of a Llama-3.1-8B plan (bf16, page 16), in one process: the first
call (compile) and the median of the compiled call, for ``dynamic=False`` (a compile per shape), ``dynamic=True``,
and ``dynamic=True`` after ``torch._dynamo.reset()`` (what a worker that resets dynamo per job pays: inductor's
on-disk cache answers). Outputs of the two modes are compared.

    python benchmarks/experiments/flex_dynamic.py [budget seconds]     (needs a CUDA GPU)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

import hwtune.probes.attention.candidates.flex as flex  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402
from hwtune.probes.timing import TimingOptions, capture_graph, time_cuda  # noqa: E402

SHAPES = [("decode", b, c, 1) for b in (1, 16, 64) for c in (512, 4096, 32768)]
SHAPES += [("prefill", 1, p + q, q) for q in (512, 2048) for p in (0, 8192)]


def one(mode: str, w: AttentionWorkload) -> tuple[float, float, torch.Tensor]:
    """(first call seconds, median us, output) of FLEX under ``mode``."""
    if mode == "dynamic+reset":
        torch._dynamo.reset()
    p = build_problem(w, "cuda", seed=0)
    r = flex.FlexRunner("cuda")
    r.prepare(p)
    torch.cuda.synchronize()
    t = time.perf_counter()
    r.run()
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    try:
        graph = capture_graph(r.run)
    except Exception:  # not capturable: timed eagerly
        graph = None
    stats, _ = time_cuda(r.run, l2_bytes=50 << 20, opts=TimingOptions(time_cap_s=0.5), graph=graph)
    return first, stats.median_us, r.out.clone()


def main() -> int:
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    start = time.time()
    spec = AttentionSpec(32, 8, 128, dtype="bfloat16", block_size=16)
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), "torch", torch.__version__, flush=True)
    outs: dict[tuple, torch.Tensor] = {}
    for mode in ("dynamic", "dynamic+reset", "static"):
        torch._dynamo.reset()
        dyn = mode != "static"
        flex._COMPILED[True] = torch.compile(flex_attention, dynamic=dyn)  # the runner's CUDA slot
        total = 0.0
        for phase, b, c, q in SHAPES:
            if time.time() - start > budget:
                print("budget reached", flush=True)
                return 0
            w = AttentionWorkload(spec, phase, b, c, query_len=q)
            try:
                first, us, out = one(mode, w)
            except Exception as exc:  # reported: the mode fails here
                print(f"{mode:14} {phase} b{b} ctx{c} q{q}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            total += first
            diff = ""
            key = (phase, b, c, q)
            if key in outs:
                diff = f" max|d| vs dynamic {(out.float() - outs[key].float()).abs().max().item():.3g}"
            else:
                outs[key] = out
            print(f"{mode:14} {phase} b{b} ctx{c} q{q}: first {first:6.2f} s  median {us:9.1f} us{diff}", flush=True)
        print(f"{mode}: first calls {total:.1f} s in all", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
