"""What the experiments that time the probe's own jobs share: one job (``job.run_job``, what the tuner's worker runs:
the correctness gate against the float32 reference, then the CUDA-graph timing with its L2 flush) run in this
process, so that an experiment can patch the code under test between jobs, and each result line written as it
comes (printed, and appended to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import IO, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.probes.attention.job import run_job  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402


def probe_job(workload: AttentionWorkload, backend: str, tactic: str, timing: TimingOptions) -> dict:
    """The probe's job for one candidate on one workload, in this process (seed 0, CUDA)."""
    job = {"workload": workload.to_dict(), "backend": backend, "tactic": tactic, "device": "cuda", "seed": 0,
           "timing": dataclasses.asdict(timing)}  # fmt: skip
    return run_job(job)


def emit(line: dict, out: IO[str] | None) -> None:
    """Print one result line and append it to ``out`` (flushed: a crash later keeps the lines so far)."""
    text = json.dumps(line)
    print(text, flush=True)
    if out:
        out.write(text + "\n")
        out.flush()


def options(doc: str) -> tuple[TimingOptions, IO[str] | None]:
    """The experiments' command line: ``--time-cap`` (seconds of timing per candidate, the oracle's 0.3 by default)
    and ``--out`` (a JSON Lines file appended to); returns the timing and the open file (or None)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--time-cap", type=float, default=0.3, help="seconds of timing per candidate (the oracle's)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    return dataclasses.replace(TimingOptions(), time_cap_s=args.time_cap), args.out.open("a") if args.out else None


def decode_workloads(
    models: Sequence[tuple[str, int, str]], shapes: Sequence[tuple[int, int]]
) -> Iterator[tuple[dict, AttentionWorkload]]:
    """Each (model config under tests/data/models, TP, kv-cache dtype) x (batch, context) decode workload, with the
    fields that name it in a result line."""
    for model, tp, kv in models:
        spec = attention_spec(load_model_config(ROOT / "tests/data/models" / model), tp, kv_cache_dtype=kv)
        for batch, ctx in shapes:
            named = {"model": model, "tp": tp, "kv_cache_dtype": kv, "batch": batch, "context": ctx}
            yield named, AttentionWorkload(spec, "decode", batch, ctx, query_len=spec.query_len_decode)


def prefill_workloads(
    cases: Sequence[tuple[str, int, Sequence[tuple[int, int]]]],
) -> Iterator[tuple[dict, AttentionWorkload]]:
    """Each (model config under tests/data/models, TP, (chunk, cached prefix) shapes) prefill workload of one request,
    with the fields that name it in a result line."""
    for model, tp, shapes in cases:
        spec = attention_spec(load_model_config(ROOT / "tests/data/models" / model), tp)
        for chunk, prefix in shapes:
            named = {"model": model, "tp": tp, "chunk": chunk, "prefix": prefix}
            yield named, AttentionWorkload(spec, "prefill", 1, chunk + prefix, query_len=chunk)


def outcome(r: dict) -> dict:
    """A job result's fields for a result line: status, median and spread, the error's relative L2, the config the
    candidate ran, the message's start."""
    stats, extra = r.get("stats") or {}, r.get("extra") or {}
    return {"status": r.get("status"), "median_us": stats.get("median_us"), "spread": stats.get("spread"),
            "rel_l2": (r.get("error") or {}).get("rel_l2"), "config": extra.get("config"),
            "message": r.get("message", "")[:200]}  # fmt: skip
