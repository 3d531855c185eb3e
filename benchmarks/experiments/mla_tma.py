"""HWTUNE_TRITON_MLA's latent tiles copied by TMA (``MlaConfig.tma``) against the same configs' gathers, at the
DeepSeek-V3 TP 8 decode shapes where FlashInfer's fa3 or vLLM's FLASH_ATTN_MLA beat the kernel on an H200 (issue 19;
docs/regret.md: batch 8, 32 and 128 at 700-12000 tokens) and two where it wins (1 x 3000, 48 x 3000), at 16- and
64-token pages.

The kernel reaches 2.0-2.3 TB/s of latent there against 3.5-3.6 at batch 200-400 (docs/kernels.md): each program
computes an address per 16-byte vector of a ``[block_n, 576]`` tile; a TMA copy moves the tile with no per-element
address, which frees registers and issue slots for deeper pipelines. Here ``mla_config_space`` is replaced by a small
space (auto's config, then KV tiles of 16, 32 and 64 positions dividing the page x auto's and the one-wave split
count x (warps, stages) (4, 2), (4, 3) and (4, 4), each with gathers and with TMA), and the probe's own job
(``job.run_job``: the correctness gate against the float32 reference, then the CUDA-graph timing with its L2 flush)
measures the ``tuned`` tactic with it: every config must match auto's output, and the record keeps each config's
screen time, so TMA and gathers compare config by config.

    python benchmarks/experiments/mla_tma.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU, SM 9.0+)
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
from hwtune.kernels.configs import cdiv  # noqa: E402

SHAPES = [(8, 3000), (32, 3000), (128, 3000), (8, 12000), (32, 700), (128, 700), (1, 3000), (48, 3000)]
PAGES = (16, 64)
WARPS_STAGES = ((4, 2), (4, 3), (4, 4))


def tma_space(page: int):  # noqa: ANN201 - the config-space function for one page size
    """``mla_config_space``'s replacement at ``page``: auto's config, then gathers and TMA twins (see module doc)."""

    def space(**shape: int) -> list[triton_mla.MlaConfig]:
        auto = triton_mla.default_mla_config(**shape)
        programs = shape["batch"] * cdiv(shape["max_query_len"], auto.block_t) * cdiv(shape["num_heads"], auto.block_h)
        one_wave = max(1, min(mla_configs.MAX_SPLITS, 2 * shape["sms"] // programs))
        out, seen = [auto], {auto}
        for block_n in (n for n in (16, 32, 64) if page % n == 0):
            most = max(1, min(mla_configs.MAX_SPLITS, shape["max_seq_len"] // block_n))
            for splits in sorted({min(auto.num_splits, most), min(one_wave, most)}):
                for warps, stages in WARPS_STAGES:
                    for tma in (False, True):
                        cfg = triton_mla.MlaConfig(auto.block_h, auto.block_t, block_n, splits, warps, stages, tma=tma)
                        if cfg not in seen:
                            seen.add(cfg)
                            out.append(cfg)
        return out

    return space


def main() -> int:
    timing, out = options(__doc__)
    base = attention_spec(load_model_config(ROOT / "tests/data/models/deepseek-v3.json"), 8)
    for page in PAGES:
        spec = dataclasses.replace(base, block_size=page)
        for batch, ctx in SHAPES:
            workload = AttentionWorkload(spec, "decode", batch, ctx, query_len=spec.query_len_decode)
            with mock.patch.object(triton_mla, "mla_config_space", tma_space(page)):
                r = probe_job(workload, "HWTUNE_TRITON_MLA", "tuned", timing)
            stats, extra = r.get("stats") or {}, r.get("extra") or {}
            line = {"page": page, "batch": batch, "context": ctx, "status": r.get("status"),
                    "median_us": stats.get("median_us"), "config": extra.get("config"),
                    "searched_us": extra.get("searched_us"), "screened_us": extra.get("screened_us"),
                    "rejected": extra.get("rejected_configs"), "message": r.get("message", "")[:300]}  # fmt: skip
            emit(line, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
