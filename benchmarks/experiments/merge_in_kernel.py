"""HWTUNE_TRITON_ATTN's split-KV merge inside the decode kernel (``split_kv.merge_if_last``) against the second merge
kernel it replaced, at the decode shapes where the Triton kernel lost to FlashInfer by 3-26 % (issue 17: Mixtral-8x7B
TP 2 and Llama-3.1-8B with an fp8 KV cache; docs/regret.md).

Every measurement is the probe's own job (``job.run_job``, what the tuner's worker runs: correctness gate against the
float32 reference, then the CUDA-graph timing with its L2 flush), run in this process so that the merge path can be
switched between jobs: ``kernel`` replaces ``triton_attention.merges_in_kernel`` with one that always says no (the
code before this change), ``in-kernel`` is the code as it is. FlashInfer's xqa (and fa2 for bf16) run in the same
process as the yardstick. One JSON line per (model, shape, candidate, merge) on stdout and, with ``--out``, in a file.

    python benchmarks/experiments/merge_in_kernel.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import decode_workloads, emit, options, outcome, probe_job  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import triton_attention  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

SHAPES = [(1, 700), (1, 3000), (1, 12000), (2, 700), (2, 3000), (8, 700), (8, 3000), (8, 12000), (32, 700),
          (32, 3000), (48, 12000), (128, 700)]  # fmt: skip
MODELS = [("mixtral-8x7b-v0.1.json", 2, "auto"), ("llama-3.1-8b.json", 1, "fp8")]


def candidates(kv: str) -> list[tuple[str, str, str]]:
    """(backend, tactic, merge) triples: the Triton kernel both ways, and FlashInfer's decode tactics as yardstick."""
    triton = [("HWTUNE_TRITON_ATTN", t, m) for t in ("auto", "tuned") for m in ("in-kernel", "kernel")]
    flashinfer = [("FLASHINFER", "xqa", "-")] + ([("FLASHINFER", "fa2", "-")] if kv == "auto" else [])
    return triton + flashinfer


def measure(workload: AttentionWorkload, backend: str, tactic: str, merge: str, timing: TimingOptions) -> dict:
    off = mock.patch.object(triton_attention, "merges_in_kernel", lambda *args: False)
    with off if merge == "kernel" else contextlib.nullcontext():
        return probe_job(workload, backend, tactic, timing)


def main() -> int:
    timing, out = options(__doc__)
    for named, workload in decode_workloads(MODELS, SHAPES):
        for backend, tactic, merge in candidates(named["kv_cache_dtype"]):
            r = measure(workload, backend, tactic, merge, timing)
            emit({**named, "backend": backend, "tactic": tactic, "merge": merge, **outcome(r)}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
