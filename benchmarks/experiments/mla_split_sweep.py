"""HWTUNE_TRITON_MLA's split counts searched finely, at the DeepSeek-V3 TP 8 decode shapes where FlashInfer's fa3 beat
every config of the ``tuned`` space (issue 19; docs/regret.md: batch 8 at 3000-20000 tokens, batch 32 at
700-12000, 128 x 3000, by 5-13 %).

The ``tuned`` space tries splits {1, auto/4, auto/2, auto, 2 auto, 4 auto}: steps of 2x, so a split count that fills
the GPU's waves (batch x splits programs against 132 SMs) may lie between its points. Here ``mla_config_space`` is
replaced by every split count from 1 to 64 (then 80, 96, 128) x KV tiles of 32 and 64 x (warps, stages) (4, 2) and
(8, 2), and the probe's own job (``job.run_job``: correctness gate, then the CUDA-graph timing with its L2 flush)
measures the ``tuned`` tactic with it (its search: a screen of every config, then the fastest again) and fa3 beside it.
The record keeps every config's screen time, so the best split count per shape can be read off.

    python benchmarks/experiments/mla_split_sweep.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import emit, options, probe_job  # noqa: E402
from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import mla_configs, triton_mla  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

SHAPES = [(8, 3000), (8, 12000), (8, 20000), (32, 700), (32, 3000), (32, 12000), (128, 700), (128, 3000), (48, 3000)]
CANDIDATES = [("FLASHINFER_FA_MLA", "fa3"), ("HWTUNE_TRITON_MLA", "auto"), ("HWTUNE_TRITON_MLA", "tuned")]
SPLITS = list(range(1, 65)) + [80, 96, 128]


def fine_space(**shape: int) -> list[triton_mla.MlaConfig]:
    """auto's config first, then every split count of ``SPLITS`` x tiles 32, 64 x (warps, stages) (4, 2), (8, 2)."""
    auto = triton_mla.default_mla_config(**shape)
    out, seen = [auto], {auto}
    for block_n in (32, 64):
        most = max(1, min(mla_configs.MAX_SPLITS, shape["max_seq_len"] // block_n))
        for splits in sorted({min(s, most) for s in SPLITS}):
            for warps, stages in ((4, 2), (8, 2)):
                cfg = triton_mla.MlaConfig(auto.block_h, auto.block_t, block_n, splits, warps, stages)
                if cfg not in seen:
                    seen.add(cfg)
                    out.append(cfg)
    return out


def measure(workload: AttentionWorkload, backend: str, tactic: str, timing: TimingOptions) -> dict:
    with mock.patch.object(triton_mla, "mla_config_space", fine_space):
        return probe_job(workload, backend, tactic, timing)


def main() -> int:
    timing, out = options(__doc__)
    spec = attention_spec(load_model_config(ROOT / "tests/data/models/deepseek-v3.json"), 8)
    spec = dataclasses.replace(spec, block_size=16)
    for batch, ctx in SHAPES:
        workload = AttentionWorkload(spec, "decode", batch, ctx, query_len=spec.query_len_decode)
        for backend, tactic in CANDIDATES:
            r = measure(workload, backend, tactic, timing)
            stats, extra = r.get("stats") or {}, r.get("extra") or {}
            line = {"batch": batch, "context": ctx, "backend": backend, "tactic": tactic, "status": r.get("status"),
                    "median_us": stats.get("median_us"), "config": extra.get("config"),
                    "searched_us": extra.get("searched_us"), "screened_us": extra.get("screened_us"),
                    "message": r.get("message", "")[:200]}  # fmt: skip
            emit(line, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
