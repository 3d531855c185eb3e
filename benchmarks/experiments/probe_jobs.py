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
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

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
