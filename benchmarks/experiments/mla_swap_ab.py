"""HWTUNE_TRITON_MLA with the dots' operands swapped (``MlaConfig.swap_ab``) against the same configs as they are,
and FlashInfer's fa3, at DeepSeek-V3 TP 8 decode shapes on 64-token pages: those where fa3 beats the kernel on an
H200 (docs/regret.md: batch 8 at 3000-48000 tokens, 32 and 128 at 700-12000) and some where the kernel wins.

Why: one decode token of 16 heads is a 16-row program, below the 64 rows of a Hopper warpgroup MMA, so Triton
compiles its dots to ``mma.sync`` (each warp loading its operands from shared memory into registers, the query
tiles held in registers by every warp). Swapped, the scores are ``ckv @ q^T`` (``[positions, rows]``) and the
accumulator ``ckv^T @ p^T`` (``[lora, rows]``): 64 KV positions are the M side and both dots compile to
``wgmma.mma_async`` m64n16k16 with their operands read from shared memory (checked on CPU by compiling for SM 9.0).
Here ``mla_config_space`` is replaced by the real space plus a swapped twin of each of its configs of 32 or more
positions, and the probe's own job (``job.run_job``: the correctness gate against the float32 reference, then the
CUDA-graph timing with its L2 flush) measures the ``tuned`` tactic with it: every config must match auto's output,
and the record keeps each config's screen time, so the twins compare config by config.

    python benchmarks/experiments/mla_swap_ab.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU, SM 9.0+)
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

SHAPES = [(8, 3000), (8, 12000), (8, 48000), (32, 700), (32, 3000), (32, 12000), (128, 700), (128, 3000),
          (128, 12000), (1, 3000), (1, 48000), (48, 3000), (200, 700), (400, 3000)]  # fmt: skip
PAGE = 64
REAL_SPACE = mla_configs.mla_config_space


def swap_space(**shape: int) -> list[triton_mla.MlaConfig]:
    """The real space, then a swapped twin of each of its configs of 32 or more positions, and of each TMA config
    with 64-position tiles (2 stages: three 64-position stages exceed the shared memory)."""
    real = REAL_SPACE(**shape)
    twins = [dataclasses.replace(c, swap_ab=True) for c in real if c.block_n >= 32]
    twins += [dataclasses.replace(c, swap_ab=True, block_n=64, num_stages=2) for c in real if c.tma]
    return real + [t for t in dict.fromkeys(twins) if t not in real]


def main() -> int:
    timing, out = options(__doc__)
    spec = dataclasses.replace(
        attention_spec(load_model_config(ROOT / "tests/data/models/deepseek-v3.json"), 8), block_size=PAGE
    )
    for batch, ctx in SHAPES:
        workload = AttentionWorkload(spec, "decode", batch, ctx, query_len=spec.query_len_decode)
        with mock.patch.object(triton_mla, "mla_config_space", swap_space):
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
