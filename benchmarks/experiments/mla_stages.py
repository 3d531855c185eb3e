"""HWTUNE_TRITON_MLA with deeper latent pipelines than its ``tuned`` space held before this experiment (it now holds
the 32-position TMA configs with 6 and 8 stages), at the DeepSeek-V3 TP 8 decode shapes on 64-token pages where
FlashInfer's fa3 beat it on an H200 (docs/regret_history.md, `pdl_merge`: batch 8 at 3000-48000 tokens, 32 at 3000 and
12000, 128 at 700 and 3000) and three where the kernel wins.

Why: compiled for SM 9.0 (Triton 3.6, on a CPU, with the launch's 16-divisible strides; compiled_buffers.py), the
space's 32-position TMA configs with 3 or 4 stages both hold one latent buffer per loop (89 kB of shared memory: the
pipeliner divides the stages between the block-table load and the latent load), so a program prefetches one tile while
it computes another; 6 and 8 stages hold two and three buffers (126 and 163 kB, one program per SM), 16-position TMA
tiles with 8 stages three smaller ones (91 kB, two programs per SM), and 32-position gathers with 6 stages two (94
kB).
Where a config fits one program per SM, the split count that fills the SMs one program deep (``sms // programs``) is
tried beside auto's and the space's one-wave count (two programs per SM). ``mla_config_space`` is replaced by the real
space plus these configs, and the probe's own job (``job.run_job``: the correctness gate against the float32
reference, then the CUDA-graph timing with its L2 flush) measures the ``tuned`` tactic with it: every config must
match auto's output, and the record keeps each config's screen time; FlashInfer's fa3 beside it.

    python benchmarks/experiments/mla_stages.py [--shapes BATCH:CONTEXT ...] [--deep N:WARPS:STAGES:KIND:PER_SM ...]
        [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU, SM 9.0+)

``--shapes`` and ``--deep`` replace the lists below (``KIND``: ``tma`` or ``gather``; ``PER_SM``: the programs an SM
holds at that config's shared memory, 1 or 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import emit, options, probe_job  # noqa: E402
from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import mla_configs, triton_mla  # noqa: E402
from hwtune.kernels.configs import cdiv  # noqa: E402

SHAPES = [(8, 12000), (8, 48000), (128, 700), (128, 3000), (32, 3000), (32, 12000), (8, 3000), (8, 20000),
          (1, 3000), (48, 3000), (200, 700)]  # fmt: skip
PAGE = 64
REAL_SPACE = mla_configs.mla_config_space
#: (positions, warps, stages, tma, programs per SM) of the deeper configs
DEEP = ((32, 4, 6, True, 1), (32, 4, 8, True, 1), (16, 4, 8, True, 2), (32, 4, 6, False, 2))


def deep_space(deep: tuple, **shape: int) -> list[triton_mla.MlaConfig]:
    """The real space, then each of ``deep`` (as ``DEEP``) at auto's split count, the space's one-wave count (two
    programs per SM) and, where it holds one program per SM, the count that fills the SMs one program deep."""
    real = REAL_SPACE(**shape)
    auto = real[0]
    programs = shape["batch"] * cdiv(shape["max_query_len"], auto.block_t) * cdiv(shape["num_heads"], auto.block_h)
    out, seen = list(real), set(real)
    for block_n, warps, stages, tma, per_sm in deep:
        most = max(1, min(mla_configs.MAX_SPLITS, shape["max_seq_len"] // block_n))
        counts = {auto.num_splits, max(1, 2 * shape["sms"] // programs)}
        if per_sm == 1:
            counts.add(max(1, shape["sms"] // programs))
        for splits in sorted(min(c, most) for c in counts):
            cfg = triton_mla.MlaConfig(auto.block_h, auto.block_t, block_n, splits, warps, stages, tma=tma)
            if cfg not in seen:
                seen.add(cfg)
                out.append(cfg)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--shapes", nargs="*", default=[f"{b}:{c}" for b, c in SHAPES])
    ap.add_argument(
        "--deep", nargs="*", default=[f"{n}:{w}:{st}:{'tma' if t else 'gather'}:{p}" for n, w, st, t, p in DEEP]
    )
    mine, sys.argv[1:] = ap.parse_known_args()
    shapes = [tuple(int(v) for v in s.split(":")) for s in mine.shapes]
    deep = tuple(
        (int(n), int(w), int(st), kind == "tma", int(p)) for n, w, st, kind, p in (d.split(":") for d in mine.deep)
    )
    timing, out = options(__doc__)
    spec = dataclasses.replace(
        attention_spec(load_model_config(ROOT / "tests/data/models/deepseek-v3.json"), 8), block_size=PAGE
    )
    for batch, ctx in shapes:
        workload = AttentionWorkload(spec, "decode", batch, ctx, query_len=spec.query_len_decode)
        with mock.patch.object(triton_mla, "mla_config_space", functools.partial(deep_space, deep)):
            r = probe_job(workload, "HWTUNE_TRITON_MLA", "tuned", timing)
        fa3 = probe_job(workload, "FLASHINFER_FA_MLA", "fa3", timing)
        stats, extra = r.get("stats") or {}, r.get("extra") or {}
        line = {"page": PAGE, "batch": batch, "context": ctx, "status": r.get("status"),
                "median_us": stats.get("median_us"), "config": extra.get("config"),
                "fa3_us": (fa3.get("stats") or {}).get("median_us"), "fa3_status": fa3.get("status"),
                "screened_us": extra.get("screened_us"), "rejected": extra.get("rejected_configs"),
                "message": r.get("message", "")[:300]}  # fmt: skip
        emit(line, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
