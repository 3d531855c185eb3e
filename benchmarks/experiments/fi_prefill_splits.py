"""FlashInfer's fa2 prefill on tensor cores with other KV split sizes, against hwtune's Triton kernel, where the Triton
kernel beat every FlashInfer tactic (issue 17: short chunks on cached prefixes; in the regret runs of 2026-11-27/28,
Qwen3-30B-A3B at TP 4 and Llama-3.3-70B at TP 8, 8 query heads / 1 KV head per rank, 96-384 tokens on 1500-30000:
FlashInfer's best 1.02-1.27x slower; docs/regret.md). Measured here: Qwen3-30B-A3B at TP 4 and
Llama-3.1-8B at TP 1 (32 / 8 heads).

FlashInfer's fa2 prefill plan splits each request's KV into chunks so that its (query tile, KV chunk) CTAs fit its
occupancy-derived grid (flashinfer 0.6.18 ``include/flashinfer/attention/scheduler.cuh``,
``PrefillSplitQOKVIndptr`` / ``PrefillBinarySearchKVChunkSize``); ``plan(fixed_split_size=pages)`` sets the chunk
instead. Here the wrapper's ``plan`` is patched to pass a chunk that cuts the longest request's KV into ``k`` pieces
(k = 1-64, no chunk under FlashInfer's 128-token floor; ``splits`` null in the output: FlashInfer's own plan), so the
probe's own job (``job.run_job``: the correctness gate against
the float32 reference, then the timing with its L2 flush) measures FlashInfer at each split count.

    python benchmarks/experiments/fi_prefill_splits.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import emit, options, outcome, prefill_workloads, probe_job  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

#: (model config, TP, (chunk, cached prefix) shapes): short chunks on cached prefixes, where the regret runs of
#: 2026-11-27/28 missed (96 on 1500 on Qwen3, where FlashInfer won, for contrast).
CASES = [
    ("qwen3-30b-a3b.json", 4, [(96, 1500), (96, 6000), (96, 30000), (384, 1500), (384, 6000), (384, 30000)]),
    ("llama-3.1-8b.json", 1, [(96, 1500), (96, 6000)]),
]
SPLITS = (None, 1, 2, 4, 8, 16, 32, 64)
#: FlashInfer's smallest KV chunk: 128 tokens (``min_kv_chunk_size`` in ``PrefillSplitQOKVIndptr``).
MIN_CHUNK_TOKENS = 128


def measure(workload: AttentionWorkload, splits: int | None, timing: TimingOptions) -> dict:
    """FLASHINFER fa2-tc on ``workload`` with its KV cut in ``splits`` chunks (None: FlashInfer's own plan)."""
    import flashinfer

    cls = flashinfer.BatchPrefillWithPagedKVCacheWrapper
    if splits is None:
        return probe_job(workload, "FLASHINFER", "fa2-tc", timing)
    page = workload.spec.block_size
    pages = -(-workload.context_len // page)
    chunk = max(-(-pages // splits), -(-MIN_CHUNK_TOKENS // page))
    real = cls.plan

    def plan(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return real(self, *args, **{**kwargs, "fixed_split_size": chunk})

    with mock.patch.object(cls, "plan", plan):
        return probe_job(workload, "FLASHINFER", "fa2-tc", timing)


def main() -> int:
    timing, out = options(__doc__)
    for named, w in prefill_workloads(CASES):
        for splits in SPLITS:
            row = {**named, "backend": "FLASHINFER", "tactic": "fa2-tc", "splits": splits}
            try:
                emit({**row, **outcome(measure(w, splits, timing))}, out)
            except RuntimeError as exc:  # e.g. FlashInfer's split scratch overflowing the workspace
                emit({**row, "status": "error", "message": str(exc).splitlines()[-1][:300]}, out)
        r = probe_job(w, "HWTUNE_TRITON_ATTN", "tuned", timing)
        emit({**named, "backend": "HWTUNE_TRITON_ATTN", "tactic": "tuned", "splits": None, **outcome(r)}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
