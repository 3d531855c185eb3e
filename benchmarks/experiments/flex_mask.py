"""Where FLEX_ATTENTION's per-workload compile time in a tune goes (issue 17: the default tune with every backend must
fit 10 minutes). In an H100 tune of Llama-3.1-8B (2026-11-27) FLEX recorded 5-14 s of compilation at every workload
although its flex kernel is compiled with dynamic shapes (benchmarks/results/flex_dynamic_h100_2026-11-27.log: later
shapes of a spec reuse the kernel in 0-0.02 s). That experiment timed only the flex call; ``prepare`` also builds
the block mask, with ``create_block_mask(..., _compile=True)``.

For a sequence of the plan's shapes in one process (as the tune's long-lived worker runs them), per shape: seconds in
``prepare`` (the block mask) and in the first flex call, with recompilation reasons logged
(``TORCH_LOGS=recompiles``), for the runner as it is (``compiled``) and with the mask built eagerly
(``eager``: ``_compile=False``, the whole [queries, KV slots] mask materialised; its peak memory is printed).

    python benchmarks/experiments/flex_mask.py compiled|eager     (needs a CUDA GPU)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import hwtune.probes.attention.candidates.flex as flex  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

SHAPES = [("decode", 1, 512, 1), ("decode", 1, 8192, 1), ("decode", 16, 512, 1), ("decode", 16, 8192, 1)]
SHAPES += [("decode", 256, 512, 1), ("decode", 256, 8192, 1), ("decode", 4, 2000, 1), ("decode", 16, 131072, 1)]
SHAPES += [("prefill", 1, 128, 128), ("prefill", 1, 32896, 128), ("prefill", 1, 512, 512), ("prefill", 1, 8192, 8192)]


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "compiled"
    if mode == "eager":
        import torch.nn.attention.flex_attention as fa

        real = fa.create_block_mask
        fa.create_block_mask = lambda *a, **k: real(*a, **{**k, "_compile": False})
    spec = AttentionSpec(32, 8, 128, dtype="bfloat16", block_size=16, kv_layout="NHD")
    print(mode, torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), "torch", torch.__version__, flush=True)
    for phase, b, c, q in SHAPES:
        w = AttentionWorkload(spec=spec, phase=phase, batch=b, context_len=c, query_len=q)
        p = build_problem(w, "cuda", seed=0)
        r = flex.FlexRunner("cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        try:
            t0 = time.perf_counter()
            r.prepare(p)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            r.run()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            again = time.perf_counter()
            r.prepare(p)  # the gate's second batch re-plans the same runner
            torch.cuda.synchronize()
            again = time.perf_counter() - again
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            print(
                f"{mode:8} {phase} b{b} c{c} q{q}: prepare {t1 - t0:6.2f} s  first call {t2 - t1:6.2f} s  "
                f"prepare again {again:5.2f} s  peak +{peak:7.0f} MiB",
                flush=True,
            )
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{mode:8} {phase} b{b} c{c} q{q}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        del p, r
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
