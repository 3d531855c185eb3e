"""HWTUNE_TRITON_MLA with each tile's block-table entries read two tiles ahead (``MlaConfig.pages_ahead``) against the
same configs reading them in the tile's own iteration, beside FlashInfer's fa3 MLA, at the DeepSeek-V3 TP 8 decode
shapes where fa3 beat the kernel on an H200 (issue 19; docs/regret.md: batch 8, 32 and 128) and three where the kernel
wins, at 16- and 64-token pages.

Why: a tile's latent addresses come from a block-table load in the same loop iteration, so unless the compiler's
software pipeline puts that load a stage ahead, every tile pays two memory latencies one after the other; at batch
8-128 the kernel reads 2.0-2.3 TB/s of latent against 3.5-3.6 at batch 200-400 (docs/kernels.md), a latency-bound
rate. With ``pages_ahead`` the unmasked loop carries the entries of the next two tiles in registers.

Here ``mla_config_space`` is replaced by twins (auto's config, then 32- and 64-position tiles x auto's and the one-wave
split count x 4 warps with 2 and 3 stages, gathers, plus 32-position TMA tiles with 3 and 4 stages where the page
holds them, each with and without ``pages_ahead``), and the probe's own job (``job.run_job``: the correctness gate
against the float32 reference, then the CUDA-graph timing with its L2 flush) measures the ``tuned`` tactic with it:
every config must match auto's output, and the record keeps each config's screen time. FlashInfer's fa3 runs through
the same job at each shape.

    python benchmarks/experiments/mla_pages_ahead.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU, SM 9.0+)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import emit, options, outcome, probe_job  # noqa: E402
from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import mla_configs, triton_mla  # noqa: E402
from hwtune.kernels.configs import cdiv  # noqa: E402

SHAPES = [(8, 3000), (8, 12000), (8, 20000), (32, 3000), (32, 12000), (128, 700), (128, 3000), (1, 3000), (48, 3000),
          (400, 700)]  # fmt: skip
PAGES = (64, 16)


def twin_space(page: int):  # noqa: ANN201 - the config-space function for one page size
    """``mla_config_space``'s replacement at ``page``: auto's config, then twins with and without pages ahead."""

    def space(*, tma_page: int = 0, **shape: int) -> list[triton_mla.MlaConfig]:
        auto = triton_mla.default_mla_config(**shape)
        programs = shape["batch"] * cdiv(shape["max_query_len"], auto.block_t) * cdiv(shape["num_heads"], auto.block_h)
        one_wave = max(1, min(mla_configs.MAX_SPLITS, 2 * shape["sms"] // programs))
        kinds = [(n, st, False) for n in (32, 64) for st in (2, 3)]
        kinds += [(32, st, True) for st in (3, 4)] if tma_page and tma_page % 32 == 0 else []
        out, seen = [auto], {auto}
        for block_n, stages, tma in kinds:
            most = max(1, min(mla_configs.MAX_SPLITS, shape["max_seq_len"] // block_n))
            for splits in sorted({min(auto.num_splits, most), min(one_wave, most)}):
                for ahead in (False, True):
                    cfg = triton_mla.MlaConfig(
                        auto.block_h, auto.block_t, block_n, splits, 4, stages, tma=tma, pages_ahead=ahead
                    )
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
            fa3 = outcome(probe_job(workload, "FLASHINFER_FA_MLA", "fa3", timing))
            with mock.patch.object(triton_mla, "mla_config_space", twin_space(page)):
                r = probe_job(workload, "HWTUNE_TRITON_MLA", "tuned", timing)
            stats, extra = r.get("stats") or {}, r.get("extra") or {}
            line = {"page": page, "batch": batch, "context": ctx, "status": r.get("status"),
                    "median_us": stats.get("median_us"), "config": extra.get("config"), "fa3_us": fa3["median_us"],
                    "fa3_status": fa3["status"], "screened_us": extra.get("screened_us"),
                    "rejected": extra.get("rejected_configs"), "message": r.get("message", "")[:300]}  # fmt: skip
            emit(line, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
