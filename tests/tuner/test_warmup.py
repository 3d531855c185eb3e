"""The JIT warm-up's jobs (no GPU: which (workload, candidate) pairs it would compile)."""

from __future__ import annotations

from collections import Counter

import pytest

import hwtune.probes.attention.measure as probe_measure
import hwtune.tuner.warmup as warmup
from hwtune.core.devices import simulated
from hwtune.probes.attention.measure import Planned
from hwtune.tuner.plan_model import plan_from_model

MODEL = "tests/data/models/llama-3.1-8b.json"
CANDIDATES = [
    Planned("FLASHINFER", "fa2"),
    Planned("HWTUNE_TRITON_ATTN", "auto"),
    Planned("HWTUNE_TRITON_ATTN", "tuned"),
    Planned("FLEX_ATTENTION", "compiled"),
]


def test_searched_tactics_are_also_warmed_up_at_each_groups_longest_context(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(probe_measure, "plan_candidates", lambda w, profile, backends, **kw: CANDIDATES)
    profile = simulated("h100")
    plan = plan_from_model(MODEL, tp=1, kinds=["attention"], device=profile, attention_overrides={"kv_layout": "NHD"})
    todo = warmup.jobs(plan, profile, None)
    per = Counter((c.backend, c.tactic) for _, c in todo)
    assert per[("FLEX_ATTENTION", "compiled")] == 0  # compiled per shape: inside each measurement
    groups = {(w.phase, w.query_len) for w in (i.workload for i in plan.items) if w.phase in ("decode", "prefill")}
    assert per[("HWTUNE_TRITON_ATTN", "tuned")] == per[("HWTUNE_TRITON_ATTN", "auto")] + len(groups)
    tuned = [w for w, c in todo if c.tactic == "tuned"]
    longest_decode = max(i.workload.context_len for i in plan.items if i.workload.phase == "decode")
    assert any(w.phase == "decode" and w.batch <= 2 and w.context_len == longest_decode for w in tuned)
    for chunk in {q for phase, q in groups if phase == "prefill"}:
        longest = max(
            i.workload.context_len
            for i in plan.items
            if i.workload.phase == "prefill" and i.workload.query_len == chunk
        )
        assert any(w.phase == "prefill" and w.query_len == chunk and w.context_len == longest for w in tuned)
    assert all(w.context_len <= 4 * 16 or w.phase != "decode" for w, c in todo if c.tactic == "auto")


def test_the_longest_expected_compiles_start_first() -> None:
    from hwtune.core import catalogue
    from hwtune.core.types import AttentionSpec, AttentionWorkload

    w = AttentionWorkload(AttentionSpec(32, 8, 128), "decode", batch=2, context_len=64)
    todo = [(w, c) for c in CANDIDATES] + [(w, Planned("HWTUNE_TRITON_ATTN", "tuned"))]
    order = warmup.by_expected_compile(todo)

    def expected(c: Planned) -> float:
        return catalogue.get("attention", c.backend).tactic(c.tactic).compile_s or 5.0

    seconds = [expected(c) for _, c in order]
    assert seconds == sorted(seconds, reverse=True) and len(order) == len(todo)
    tuned = [i for i, (_, c) in enumerate(order) if c.tactic == "tuned"]
    assert tuned == [tuned[0], tuned[0] + 1]  # equals keep their planned order, next to each other


def test_a_failed_warm_up_job_is_said_in_the_notes(monkeypatch) -> None:  # noqa: ANN001
    """A job whose kernels did not compile up front (its worker errored or died) is named with its status and
    message; one that ran is not."""
    from contextlib import nullcontext

    from hwtune.core.records import LatencyStats, MeasurementRecord

    monkeypatch.setattr(probe_measure, "plan_candidates", lambda w, profile, backends, **kw: CANDIDATES[:3])
    monkeypatch.setattr(warmup, "WorkerPool", nullcontext)

    def measure(w, cands, **kw):  # noqa: ANN001, ANN003, ANN202
        [c] = cands
        bad = c.tactic == "tuned" and w.phase == "prefill" and w.batch == 1
        status, message = ("error", "CUDA out of memory") if bad else ("ok", "")
        stats = None if bad else LatencyStats.from_samples([10.0])
        rec = MeasurementRecord(
            "attention", w.to_dict(), w.key(), c.backend, c.tactic, status, stats=stats, message=message
        )
        return [rec]

    monkeypatch.setattr(warmup, "measure_attention", measure)
    profile = simulated("h100")
    plan = plan_from_model(MODEL, tp=1, kinds=["attention"], device=profile, attention_overrides={"kv_layout": "NHD"})
    notes: list[str] = []
    warmup.warm_up(plan, profile, None, parallel=2, notes=notes)
    [note] = notes
    chunks = {i.workload.query_len for i in plan.items if i.workload.phase == "prefill"}
    assert note.startswith(f"warm-up: {len(chunks)} of ")
    assert "HWTUNE_TRITON_ATTN/tuned attention prefill b1 ctx" in note and " q128 NHD" in note
    assert "error CUDA out of memory" in note
    assert "FLASHINFER" not in note and "decode" not in note


def test_a_job_repeated_in_the_other_layout_waits_for_every_first_one() -> None:
    from dataclasses import replace

    from hwtune.core.types import AttentionSpec, AttentionWorkload

    nhd = AttentionWorkload(AttentionSpec(32, 8, 128, kv_layout="NHD"), "decode", batch=2, context_len=64)
    hnd = replace(nhd, spec=replace(nhd.spec, kv_layout="HND"))
    fa3, cheap = Planned("FLASHINFER", "fa3"), Planned("TORCH_SDPA", "math")
    order = warmup.by_expected_compile([(nhd, fa3), (nhd, cheap), (hnd, fa3), (hnd, cheap)])
    assert order == [(nhd, fa3), (nhd, cheap), (hnd, fa3), (hnd, cheap)]


@pytest.mark.timeout(60, method="thread")  # a lost wakeup would hang the executor's join, not fail
def test_jobs_that_compile_one_module_never_run_at_once(monkeypatch) -> None:  # noqa: ANN001
    """FlashInfer builds one module per tactic for every phase and layout: its decode, prefill and mixed jobs run one
    after another while the other processes compile something else; a searched tactic's jobs (one kernel class each)
    may run side by side, but not a job and its twin in the other layout."""
    import threading
    import time
    from contextlib import nullcontext

    cands = [Planned("FLASHINFER", "fa3"), Planned("HWTUNE_TRITON_ATTN", "tuned"), Planned("TORCH_SDPA", "math")]
    monkeypatch.setattr(probe_measure, "plan_candidates", lambda w, profile, backends, **kw: cands)
    monkeypatch.setattr(warmup, "WorkerPool", nullcontext)
    lock = threading.Lock()
    running: Counter[tuple] = Counter()
    overlaps: list[tuple] = []
    most = Counter()

    def measure(w, cands, **kw):  # noqa: ANN001, ANN003, ANN202
        [c] = cands
        fam = warmup.family((w, c))
        with lock:
            running[fam] += 1
            if running[fam] > 1:
                overlaps.append(fam)
            most["together"] = max(most["together"], sum(running.values()))
        time.sleep(0.02)
        with lock:
            running[fam] -= 1
        return [_record(w, c)]

    monkeypatch.setattr(warmup, "measure_attention", measure)
    plan, todo = _both_layouts()
    profile = simulated("h100")
    fa3 = {warmup.family(j) for j in todo if j[1].tactic == "fa3"}
    assert len(fa3) == 1 and sum(j[1].tactic == "fa3" for j in todo) >= 4  # phases x layouts, one module
    tuned = {warmup.family(j) for j in todo if j[1].tactic == "tuned"}
    assert 1 < len(tuned) < sum(j[1].tactic == "tuned" for j in todo)  # layouts share, kernel classes do not
    warmup.warm_up(plan, profile, None, parallel=4)
    assert not overlaps
    assert most["together"] >= 3  # the processes did not queue behind one another


@pytest.mark.timeout(60, method="thread")
def test_a_failed_job_drops_the_rest_of_its_compile_family(monkeypatch) -> None:  # noqa: ANN001
    """fa3's module build timing out in one job is not tried again by its other phases and layouts (each could wait
    out the job timeout); other families go on, and the note counts what was dropped."""
    from contextlib import nullcontext

    cands = [Planned("FLASHINFER", "fa3"), Planned("TORCH_SDPA", "math")]
    monkeypatch.setattr(probe_measure, "plan_candidates", lambda w, profile, backends, **kw: cands)
    monkeypatch.setattr(warmup, "WorkerPool", nullcontext)
    ran: Counter[str] = Counter()

    def measure(w, cands, **kw):  # noqa: ANN001, ANN003, ANN202
        [c] = cands
        ran[c.tactic] += 1
        return [_record(w, c, "timeout" if c.tactic == "fa3" else "ok")]

    monkeypatch.setattr(warmup, "measure_attention", measure)
    plan, todo = _both_layouts()
    profile = simulated("h100")
    n_fa3 = sum(c.tactic == "fa3" for _, c in todo)
    notes: list[str] = []
    warmup.warm_up(plan, profile, None, parallel=3, notes=notes)
    assert ran["fa3"] == 1 and ran["math"] == sum(c.tactic == "math" for _, c in todo)
    [note] = notes
    assert note.startswith(f"warm-up: 1 of {len(todo)} kernel variant job(s) failed ({n_fa3 - 1} more of their")


def _record(w, c, status: str = "ok"):  # noqa: ANN001, ANN202
    from hwtune.core.records import LatencyStats, MeasurementRecord

    stats = LatencyStats.from_samples([10.0]) if status == "ok" else None
    return MeasurementRecord("attention", w.to_dict(), w.key(), c.backend, c.tactic, status, stats=stats)


def _both_layouts():  # noqa: ANN202
    """Llama-3.1-8B's default plan in both KV layouts on a simulated H100, and its warm-up jobs."""
    profile = simulated("h100")
    plan = plan_from_model(MODEL, tp=1, kinds=["attention"], device=profile)
    return plan, warmup.jobs(plan, profile, None)
