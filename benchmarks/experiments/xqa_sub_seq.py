"""FlashInfer's xqa decode with more sub-sequences per request, against hwtune's Triton kernel, where the Triton kernel
beat xqa (issue 17: Llama-3.1-8B with an fp8 KV cache at one or two requests from 12000 tokens, 5-10 %; Mixtral-8x7B
TP 2 bf16 at one request from 12000 tokens; docs/regret.md).

xqa on Hopper splits each request's context over ``round(sm_count * 3 / (batch * kv_heads) * 0.25)`` CTAs
(flashinfer 0.6.18 ``csrc/xqa/mha_sm90.cu``, ``nbSubSeqPerSeq``): one request with 8 KV heads gets 12 sub-sequences,
96 CTAs on a 132-SM H100. ``sm_count`` is an argument of ``flashinfer.xqa.xqa``, which
``trtllm_batch_decode_with_kv_cache`` fills with the device's SM count; here that lookup is replaced by ``factor``
times the SM count (factor 1: the unchanged call), so the probe's own job (``job.run_job``: correctness gate against
the float32 reference, then the CUDA-graph timing with its L2 flush) measures xqa at 1-8x the sub-sequences.

    python benchmarks/experiments/xqa_sub_seq.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import decode_workloads, emit, options, outcome, probe_job  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

SHAPES = [(1, 3000), (1, 12000), (1, 20000), (1, 48000), (2, 12000), (2, 20000), (2, 48000), (8, 12000), (32, 3000)]
MODELS = [("llama-3.1-8b.json", 1, "fp8"), ("mixtral-8x7b-v0.1.json", 2, "auto")]
FACTORS = (1, 2, 4, 8)


def measure(workload: AttentionWorkload, backend: str, tactic: str, factor: int, timing: TimingOptions) -> dict:
    import flashinfer.decode as fi_decode

    sms = fi_decode.get_device_sm_count
    with mock.patch.object(fi_decode, "get_device_sm_count", lambda device: factor * sms(device)):
        return probe_job(workload, backend, tactic, timing)


def main() -> int:
    timing, out = options(__doc__)
    runs = [("FLASHINFER", "xqa", f) for f in FACTORS] + [("HWTUNE_TRITON_ATTN", "tuned", 1)]
    for named, workload in decode_workloads(MODELS, SHAPES):
        for backend, tactic, factor in runs:
            r = measure(workload, backend, tactic, factor, timing)
            emit({**named, "backend": backend, "tactic": tactic, "sm_factor": factor, **outcome(r)}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
