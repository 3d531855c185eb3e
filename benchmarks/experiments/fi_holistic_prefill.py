"""FlashInfer's holistic (persistent) attention kernel, ``flashinfer.BatchAttention``, on the prefill shapes where
hwtune's Triton kernel beat every FlashInfer tactic (issue 17: short chunks on cached prefixes, FlashInfer's best
1.09-1.37x slower in the regret runs of 2026-11-28; docs/regret.md), and on long chunks, where fa3
leads, for contrast.

``BatchAttention`` (flashinfer 0.6.18 ``flashinfer/attention/_core.py``) plans one persistent launch that balances
(query tile, KV chunk) work over the SMs; no engine runs it for prefill today, so a win here would make it a candidate
tactic, not a finding about an engine. Its ``plan`` takes the CSR page table plus per-request KV lengths, its ``run``
returns the output and its LSE. Here ``FlashInferRunner``'s prefill plan and run are patched to call it for the
``fa2-tc`` tactic, so the probe's own job (``job.run_job``: the correctness gate against the float32 reference, LSE
included, then the timing with its L2 flush) measures it; each shape also measures fa2-tc, fa3 and the Triton kernel's
``tuned`` tactic unpatched.

    python benchmarks/experiments/fi_holistic_prefill.py [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.experiments.probe_jobs import emit, options, outcome, prefill_workloads, probe_job  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.attention.candidates.flashinfer import FlashInferRunner  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

SHORT = [(96, 1500), (96, 6000), (96, 30000), (384, 1500), (384, 6000), (384, 30000)]
LONG = [(1536, 30000), (3000, 0), (6000, 30000)]
#: (model config, TP, (chunk, cached prefix) shapes): the models whose regret runs missed on short chunks
CASES = [
    ("llama-3.3-70b-instruct.json", 8, SHORT + LONG),
    ("qwen3-30b-a3b.json", 4, SHORT),
    ("llama-3.1-8b.json", 1, SHORT[:3] + LONG),
    ("qwen2.5-7b-instruct.json", 1, SHORT[:1]),
]
REFERENCES = [("FLASHINFER", "fa2-tc"), ("FLASHINFER", "fa3"), ("HWTUNE_TRITON_ATTN", "tuned")]


def _plan_holistic(self: Any, p: Any, common: dict[str, Any]) -> None:
    """``BatchAttention`` built once per runner, planned on the problem's page table and KV lengths."""
    import flashinfer

    spec = p.spec
    if p.spec.sliding_window is not None:
        raise RuntimeError("BatchAttention takes no sliding window")
    if self.wrapper is None:
        self.wrapper = flashinfer.BatchAttention(kv_layout=p.layout, device=str(p.q.device))
    self.wrapper.plan(
        p.query_start_loc,
        p.kv_indptr,
        p.kv_indices,
        p.seq_lens,
        spec.num_heads,
        spec.num_kv_heads,
        spec.head_size,
        spec.head_size,
        p.page_size,
        causal=p.causal,
        sm_scale=p.softmax_scale,
        logits_soft_cap=spec.logits_soft_cap,
        q_data_type=p.q.dtype,
        kv_data_type=p.kv_cache.dtype,
    )


def _run_holistic(self: Any) -> None:
    p = self.problem
    scales = dict(k_scale=p.k_scale, v_scale=p.v_scale) if p.is_fp8 else {}
    self.wrapper.run(p.q, p.kv_cache, out=self.out, lse=self.lse, **scales)


def holistic(workload: AttentionWorkload, timing: TimingOptions) -> dict:
    with (
        mock.patch.object(FlashInferRunner, "_plan_prefill", _plan_holistic),
        mock.patch.object(FlashInferRunner, "run", _run_holistic),
    ):
        return probe_job(workload, "FLASHINFER", "fa2-tc", timing)


def main() -> int:
    timing, out = options(__doc__)
    for named, w in prefill_workloads(CASES):
        for backend, tactic in [("FLASHINFER", "holistic"), *REFERENCES]:
            row = {**named, "backend": backend, "tactic": tactic}
            try:
                r = holistic(w, timing) if tactic == "holistic" else probe_job(w, backend, tactic, timing)
                emit({**row, **outcome(r)}, out)
            except Exception as exc:  # noqa: BLE001 - one failed candidate is a result, not the end of the run
                emit({**row, "status": "error", "message": str(exc).splitlines()[-1][:300]}, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
