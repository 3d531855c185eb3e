"""A dtype rule lifted by measurement (selector/lifted.py), both directions, on a real SQLite store.

flashinfer_nvlink_one_sided accepts only nvfp4 activations (its workspace sized for nvfp4 corrupted bf16 in a real
engine). A stored ``ok`` of that backend for the exact spec in this environment, with no crash or wrong answer,
lifts the rule; a measurement of another environment, spec or dtype, a failure, or another rejection never does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

import hwtune
from hwtune.core.devices import simulated
from hwtune.core.environment import SoftwareStack, current_environment
from hwtune.core.errors import BackendNotValidError
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload
from hwtune.db.store import Store
from hwtune.selector.api import _cached

ONE_SIDED = "flashinfer_nvlink_one_sided"
AGRS = "allgather_reducescatter"
SPEC = All2AllSpec(ep_size=2, num_experts=256, topk=8, hidden_size=7168, quant_dtype="bf16")
H200 = simulated("h200")
TOKENS = (16, 1024)


def rec(
    backend: str,
    us: float,
    *,
    spec: All2AllSpec = SPEC,
    tokens: int = 16,
    status: str = "ok",
    host: str = "node-a",
    env=None,
    day: int = 20,
    message: str = "",
) -> MeasurementRecord:
    env = env or current_environment(H200)
    w = All2AllWorkload(spec, tokens)
    return MeasurementRecord(
        kind="all2all",
        workload=w.to_dict(),
        workload_key=w.key(),
        backend=backend,
        tactic="default",
        status=status,
        message=message,
        stats=LatencyStats.from_samples([us] * 3) if status == "ok" else None,
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        host=host,
        run_id=f"run-{host}",
        created_at=dt.datetime(2026, 11, day, 12, tzinfo=dt.timezone.utc),
    )


def sweep(backend: str, us: float, **kw) -> list[MeasurementRecord]:
    return [rec(backend, us * t / 16, tokens=t, **kw) for t in TOKENS]


@pytest.fixture()
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'lift.db'}"
    with Store.open(url) as s:
        yield url, s
    _cached.cache_clear()


def select(url: str, spec: All2AllSpec = SPEC, **kw):
    _cached.cache_clear()
    return hwtune.select_all2all(spec, device=H200, assume_installed=True, db=url, distributed=False, **kw)


def rule_stands(sel, spec: All2AllSpec = SPEC) -> None:
    assert ONE_SIDED not in [r.backend for r in sel.ranked]
    assert f"accepts only nvfp4 activations; {spec.quant_dtype} was asked" in " ".join(sel.rejected[ONE_SIDED])
    assert not any("rule is lifted" in n for n in sel.notes)


def test_without_a_measurement_the_rule_stands_and_the_error_says_how_to_measure(store) -> None:
    url, s = store
    s.write(sweep(AGRS, 100.0))
    rule_stands(select(url))
    with pytest.raises(BackendNotValidError) as err:
        select(url, backend=ONE_SIDED)
    msg = str(err.value)
    assert "quantize activations to nvfp4 (--quant-dtype nvfp4)" in msg
    assert f"--backends {ONE_SIDED} --quant-dtype bf16" in msg and "lifts the dtype rule for this exact spec" in msg


def test_a_stored_pass_here_lifts_the_rule_and_says_by_which_evidence(store) -> None:
    url, s = store
    s.write(sweep(AGRS, 100.0) + sweep(ONE_SIDED, 40.0) + sweep(ONE_SIDED, 42.0, host="node-b", day=21))
    sel = select(url)
    assert sel.backend == ONE_SIDED and sel.ranked[0].source != "static"  # measured fastest, so ranked first
    assert ONE_SIDED not in sel.rejected
    [note] = [n for n in sel.notes if "rule is lifted" in n]
    assert "accepts only nvfp4 activations" in note and "lifted for bf16 at EP 2, hidden size 7168" in note
    assert "4 passing correctness measurement(s) (host node-a, 2026-11-20; host node-b, 2026-11-21)" in note
    assert note in sel.explain() and note in sel.to_dict()["notes"]
    assert select(url, backend=ONE_SIDED).backend == ONE_SIDED  # an explicit request is honoured now


def _other_stack_env():
    other = dataclasses.replace(SoftwareStack.current(), flashinfer="0.6.11")
    return current_environment(H200).__class__(H200, other)


NOT_LIFTING = {
    "another environment (flashinfer 0.6.11)": lambda: sweep(ONE_SIDED, 40.0, env=_other_stack_env()),
    "another GPU (B200)": lambda: sweep(ONE_SIDED, 40.0, env=current_environment(simulated("b200"))),
    "another hidden size": lambda: sweep(ONE_SIDED, 40.0, spec=dataclasses.replace(SPEC, hidden_size=4096)),
    "another EP size": lambda: sweep(ONE_SIDED, 40.0, spec=dataclasses.replace(SPEC, ep_size=4)),
    "another dtype (fp8)": lambda: sweep(ONE_SIDED, 40.0, spec=dataclasses.replace(SPEC, quant_dtype="fp8")),
    "its own dtype (nvfp4)": lambda: sweep(ONE_SIDED, 40.0, spec=dataclasses.replace(SPEC, quant_dtype="nvfp4")),
    "a wrong answer only": lambda: [rec(ONE_SIDED, 0, status="wrong_answer", message="combine: 7 tokens differ")],
    "a crash only": lambda: [rec(ONE_SIDED, 0, status="crashed", message="killed by signal SIGSEGV")],
    "unsupported only (the default tune)": lambda: [rec(ONE_SIDED, 0, status="unsupported", message="rejected")],
    "a timeout only": lambda: [rec(ONE_SIDED, 0, status="timeout", message="no answer within 600 s")],
}


@pytest.mark.parametrize("case", list(NOT_LIFTING))
def test_evidence_that_does_not_lift(store, case: str) -> None:
    url, s = store
    s.write(sweep(AGRS, 100.0) + NOT_LIFTING[case]())
    sel = select(url)
    rule_stands(sel)
    assert sel.backend == AGRS


@pytest.mark.parametrize("status", ["wrong_answer", "crashed"])
def test_a_pass_with_a_failure_here_does_not_lift_and_says_why(store, status: str) -> None:
    url, s = store
    failure = rec(ONE_SIDED, 0, tokens=33, status=status, host="node-b", day=22, message="misaligned address")
    s.write(sweep(AGRS, 100.0) + sweep(ONE_SIDED, 40.0) + [failure])
    sel = select(url)
    rule_stands(sel)
    said = " ".join(sel.rejected[ONE_SIDED])
    assert "its dtype rule stays: it also failed here" in said and "host node-b, 2026-11-22" in said
    assert "misaligned address" in said


def test_a_pass_does_not_lift_a_backend_with_another_rejection(store) -> None:
    """top-k 9 exceeds the one-sided kernel's top-k limit of 8: a passing bf16 measurement of that very spec (taken
    with --explore) must not make it valid."""
    url, s = store
    spec = dataclasses.replace(SPEC, topk=9)
    s.write(sweep(AGRS, 100.0, spec=spec) + sweep(ONE_SIDED, 40.0, spec=spec))
    sel = select(url, spec=spec)
    rule_stands(sel, spec)
    assert "supports top-k up to 8" in " ".join(sel.rejected[ONE_SIDED])


def test_no_store_no_lift() -> None:
    _cached.cache_clear()
    sel = hwtune.select_all2all(SPEC, device=H200, assume_installed=True, db=False, distributed=False)
    rule_stands(sel)
