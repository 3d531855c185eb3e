"""Replay one warm-up process's job sequence, to find the CUDA illegal memory access that HWTUNE_TRITON_ATTN's
``tuned`` warm-up jobs hit (docs/regret.md, run (6): prefill 2048 on 34816 and 8192 on 40960 tokens,
NHD, each in a warm-up process that had just run FlashInfer's fa3 jobs; the measuring worker measured both cleanly).

In one worker process, as the warm-up runs them (``tuner/warmup.py``: small batches, ``_TINY`` timing): FlashInfer
fa3's decode, prefill and mixed jobs of Llama-3.1-8B's plan (NHD), then the ``tuned`` jobs at each prefill chunk's
longest prefix, ``--repeat`` times with the Triton cache cleared before each round (the faults came with kernels
compiled in that process). Prints each job's status and message; exit 1 when any job crashed or errored.

    python benchmarks/experiments/warmup_fault.py [--repeat N] [--no-fa3]              (needs a CUDA GPU)
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --target-processes all \\
        python benchmarks/experiments/warmup_fault.py          (every tensor its own allocation, so memcheck sees
                                                                reads past a tensor that the caching allocator hides)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hwtune.core.detect import detect  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.attention.measure import Planned, measure_attention  # noqa: E402
from hwtune.probes.attention.worker import WorkerPool  # noqa: E402
from hwtune.tuner.plan import PlanItem  # noqa: E402
from hwtune.tuner.plan_model import plan_from_model  # noqa: E402
from hwtune.tuner.run import describe_item  # noqa: E402
from hwtune.tuner.warmup import _TINY, jobs  # noqa: E402

MODEL = "tests/data/models/llama-3.1-8b.json"


def sequence(with_fa3: bool) -> list[tuple[AttentionWorkload, Planned]]:
    profile = detect()
    plan = plan_from_model(MODEL, device=profile, attention_overrides={"kv_layout": "NHD"})
    todo = jobs(plan, profile, ("FLASHINFER:fa3", "HWTUNE_TRITON_ATTN:tuned"))
    fa3 = [j for j in todo if j[1].tactic == "fa3"] if with_fa3 else []
    tuned = [j for j in todo if j[1].tactic == "tuned" and j[0].phase == "prefill" and j[0].batch == 1]
    return fa3 + sorted(tuned, key=lambda j: j[0].query_len)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-fa3", action="store_true", help="the tuned jobs alone (the control)")
    args = ap.parse_args()
    bad = 0
    for round_ in range(args.repeat):
        cache = tempfile.mkdtemp(prefix="triton-")  # compiled in this process, as in the failing warm-up jobs
        os.environ["TRITON_CACHE_DIR"] = cache
        with WorkerPool() as pool:
            for w, c in sequence(not args.no_fa3):
                profile = detect()
                [rec] = measure_attention(
                    w, [c], device="cuda", profile=profile, timing=_TINY, timeout_s=900, pool=pool
                )
                print(
                    f"round {round_} {c.backend}/{c.tactic} {describe_item(PlanItem(w))}: {rec.status} "
                    f"compile {rec.compile_time_s or 0:.1f} s {rec.message[:300]}",
                    flush=True,
                )
                bad += rec.status in ("error", "crashed", "timeout")
        shutil.rmtree(cache, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
