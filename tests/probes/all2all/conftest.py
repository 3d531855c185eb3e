"""Shared helpers for the all2all tests: tiny CPU specs and the environment spawned ranks need."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.core.types import All2AllSpec, All2AllWorkload

ROOT = str(Path(__file__).resolve().parents[3])
#: Spawned ranks import the faulty candidates from this repository's tests package.
CHILD_ENV = {"PYTHONPATH": ROOT}
FAULTY = "tests.probes.all2all.faulty"


def spec(ep: int = 2, experts: int = 8, topk: int = 2, hidden: int = 256, quant: str = "bf16") -> All2AllSpec:
    return All2AllSpec(ep_size=ep, num_experts=experts, topk=topk, hidden_size=hidden, quant_dtype=quant)


def wl(tokens: int = 8, routing: str = "uniform", **kw: object) -> All2AllWorkload:
    return All2AllWorkload(spec(**kw), tokens, routing)  # type: ignore[arg-type]


@pytest.fixture
def fast() -> dict[str, object]:
    """measure_* keyword arguments that keep a CPU trial to a few seconds."""
    return {
        "device": "cpu",
        "time_cap_s": 0.05,
        "timeout_s": 60,
        "min_iters": 3,
        "max_iters": 20,
        "warmup_iters": 1,
        "env": CHILD_ENV,
    }
