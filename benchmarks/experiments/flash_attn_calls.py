"""What FLASH_ATTN's timed call (vLLM's FA3, ``vllm_flash_attn``) spends its time on, beside FlashInfer's prefill.

Why: in the H200 regret run with vLLM's FA3 as a candidate (2026-11-28, ``regret_h200_2026-11-28_fa3_models``,
Llama-3.1-8B) FLASH_ATTN was the fastest prefill at every chunk of 1536 tokens or more and at 96 tokens on 6000 and
30000 cached, but took 17.7 us for 96 tokens from empty against FlashInfer fa3's 9.7 and 54.1 us for 384 on 1500
against 35.5: a constant cost that the kernel's work does not explain. For each model and shape this prints, per
candidate (``FLASH_ATTN`` fa3, FlashInfer's fa3 and fa2-tc): the GPU kernels of one ``run()`` (torch.profiler, mean
device us per call), the median of ``run()`` replayed from a CUDA graph where it can be captured (``graph_us``, no
L2 flush), and the probe's own job (gate, then its timing: ``median_us``).

    python benchmarks/experiments/flash_attn_calls.py [--models M:TP ...] [--shapes PHASE:BATCH:CONTEXT:QUERY ...]
        [--candidates BACKEND:TACTIC ...] [--time-cap 0.3] [--out FILE.jsonl]   (needs a CUDA GPU and vllm's
        vllm_flash_attn)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from mla_decode_gap import graph_us, kernels  # noqa: E402
from probe_jobs import ROOT, emit, options, outcome, probe_job  # noqa: E402

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.attention.candidates.base import load_candidate  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

MODELS = ["llama-3.1-8b.json:1", "chatglm2-6b.json:1", "qwen3-30b-a3b.json:4"]
SHAPES = ["prefill:1:96:96", "prefill:1:384:384", "prefill:1:1884:384", "prefill:1:6096:96", "prefill:1:6000:6000",
          "decode:1:700:1", "decode:32:3000:1"]  # fmt: skip
CANDIDATES = [("FLASH_ATTN", "fa3"), ("FLASHINFER", "fa3"), ("FLASHINFER", "fa2-tc")]


def calls(workload: AttentionWorkload, backend: str, tactic: str) -> dict:
    """The kernels of one call and its CUDA-graph median (or why it could not be captured)."""
    candidate = load_candidate(backend)
    if reason := candidate.unavailable(workload, tactic, "cuda"):
        return {"unavailable": reason}
    runner = candidate.runner(workload, tactic, "cuda")
    runner.prepare(build_problem(workload, "cuda", seed=0))
    runner.run()
    torch.cuda.synchronize()
    row: dict = {"kernels": kernels(runner.run)}
    try:
        row["graph_us"] = round(graph_us(runner.run), 2)
    except Exception as e:  # noqa: BLE001 - a call that cannot be captured says why
        row["graph_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        torch.cuda.synchronize()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    ap.add_argument("--candidates", nargs="*", default=[f"{b}:{t}" for b, t in CANDIDATES])
    mine, sys.argv[1:] = ap.parse_known_args()
    timing, out = options(__doc__)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    for model, tp in (m.split(":") for m in mine.models):
        spec = attention_spec(load_model_config(ROOT / "tests/data/models" / model), int(tp))
        for phase, batch, ctx, query in (s.split(":") for s in mine.shapes):
            workload = AttentionWorkload(spec, phase, int(batch), int(ctx), query_len=int(query))
            named = {"model": model, "tp": int(tp), "phase": phase, "batch": int(batch), "context": int(ctx),
                     "query": int(query)}  # fmt: skip
            for backend, tactic in (c.split(":") for c in mine.candidates):
                row = {**named, "backend": backend, "tactic": tactic}
                try:
                    row |= calls(workload, backend, tactic)
                except Exception as e:  # noqa: BLE001 - an unsupported shape must not lose the rest
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                row |= outcome(probe_job(workload, backend, tactic, timing))
                emit(row, out)


if __name__ == "__main__":
    main()
