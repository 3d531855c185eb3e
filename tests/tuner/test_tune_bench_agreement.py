"""`hwtune tune` measures what `hwtune bench` measures: no state a long-lived worker carries from earlier
candidates may change a later measurement.

The case that did: torch.compile specialises flex_attention per shape, and after
``torch._dynamo.config.recompile_limit`` (8) shapes in one worker process it silently fell back to the
eager, unfused path, so a tune stored FLEX_ATTENTION decode at 15-100x what a fresh `bench` measured
(10.8x at batch 8 x 320 tokens in this test's plan, CPU). Workers now give compiled-per-shape backends a
clean compiler per job on the CPU (per spec on CUDA, where they compile with dynamic shapes) and fail closed past
the limit; this test runs more shapes than the limit through
one tuner and requires every result to be a compiled, correct, timed measurement.

Timing agreement itself (stored median against a fresh `bench`) is measured by benchmarks/tune_vs_bench.py:
on a shared 2-core CI machine the same CPU measurement varies by 2-5x between runs, so a timed comparison
here could not fail for the right reason only. On a GPU, whose timings hold GPU time only (``probes.timing``: the
spin before a plain call covers its host time), the last test asserts 3 %.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.store import Store
from hwtune.tuner.options import TuneOptions
from hwtune.tuner.plan import Plan, PlanItem
from hwtune.tuner.run import Tuner

SPEC = AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="float32")
#: More distinct shapes than torch's recompile limit (8).
SHAPES = [(1, 64), (1, 192), (2, 64), (2, 192), (3, 128), (4, 64), (5, 96), (6, 64), (7, 64), (8, 320), (16, 512)]
COMPILED_PER_SHAPE = [
    b.name for b in catalogue.backends("attention") if b.compile_per_shape and "cpu" in (b.rules.device_types or ())
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", COMPILED_PER_SHAPE)
def test_a_long_tune_keeps_compiling_every_shape(tmp_path: Path, backend: str) -> None:
    items = [PlanItem(AttentionWorkload(SPEC, "decode", batch=b, context_len=c, query_len=1), 0) for b, c in SHAPES]
    plan = Plan(name="many shapes", items=items, time_cap_s=0.2, backends=(backend,))
    with Store.open(f"sqlite:///{tmp_path / 'r.db'}") as store:
        report = Tuner(plan, store, TuneOptions(device="cpu", time_cap_s=0.2), profile=CPU_PROFILE).run()
        records = store.measurements(run_id=report.run_id)
    assert len(records) == len(SHAPES)
    failed = [(r.workload["batch"], r.workload["context_len"], r.status, r.message[:200]) for r in records if not r.ok]
    assert not failed, f"{backend} after {len(SHAPES)} shapes in one worker: {failed}"


def test_the_worker_fails_closed_past_the_recompile_limit() -> None:
    """Without a clean compiler per job, the limit raises (recorded as an error), never runs eager."""
    import torch

    import hwtune.probes.attention.job  # noqa: F401 - sets the flag, as every worker does

    assert torch._dynamo.config.fail_on_recompile_limit_hit is True


def test_dynamic_shape_compiles_are_reset_per_spec_on_cuda_and_per_job_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA FLEX compiles with dynamic shapes, so the worker keeps its compiler across one spec's jobs and resets
    it when the spec changes; on the CPU (a compile per shape) every job starts clean; other backends never reset."""
    import torch

    from hwtune.probes.attention import job

    resets: list[int] = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    monkeypatch.setattr(job, "_DYNAMIC_LAST", {})
    other = AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="float32", kv_layout="HND")
    for spec in (SPEC, SPEC, SPEC, other, other, SPEC):
        job._forget_compiled_shapes("FLEX_ATTENTION", spec.key(), "cuda")
    assert len(resets) == 3
    resets.clear()
    for spec in (SPEC, SPEC, other):
        job._forget_compiled_shapes("FLEX_ATTENTION", spec.key(), "cpu")
        job._forget_compiled_shapes("HWTUNE_TRITON_ATTN", spec.key(), "cuda")
    assert len(resets) == 3


#: Llama-3.1-8B's attention on a GPU: a decode batch and a prefill chunk on a cached prefix.
GPU_SPEC = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128)
GPU_WORKLOADS = [
    AttentionWorkload(GPU_SPEC, "decode", batch=16, context_len=2048),
    AttentionWorkload(GPU_SPEC, "prefill", batch=1, context_len=2048, query_len=512),
]
#: A fresh process's median within this of the tune's stored median (issue 17: 3 % on an H100).
GPU_AGREEMENT = 0.03


@pytest.mark.gpu
@pytest.mark.timeout(900)  # a cold machine compiles FlashInfer's kernels first (fa3: 93 s on an H100)
def test_tune_stores_what_a_fresh_bench_measures_on_the_gpu(tmp_path: Path) -> None:
    """Every GPU backend and tactic valid here, tuned through one long-lived worker, against a fresh `bench` process
    per workload (benchmarks/tune_vs_bench.py reports the same at more shapes, over several rounds). Each fresh
    process pays its start, FLEX's compile and every candidate's gate again: with three workloads and two rounds this
    test did not finish within 270 s on an H100 whose kernels were cached."""
    from hwtune.core.detect import detect
    from hwtune.probes.attention.measure import measure_attention, plan_candidates
    from hwtune.probes.timing import TimingOptions

    profile = detect()
    timing = TimingOptions(time_cap_s=0.3)
    plan = Plan(name="tune vs bench", items=[PlanItem(w, 0) for w in GPU_WORKLOADS], time_cap_s=0.3)
    with Store.open(f"sqlite:///{tmp_path / 'r.db'}") as store:
        report = Tuner(plan, store, TuneOptions(device="cuda", time_cap_s=0.3), profile=profile).run()
        stored = {(r.workload_key, r.backend, r.tactic): r for r in store.measurements(run_id=report.run_id) if r.ok}
    fresh: dict[tuple[str, str, str], float] = {}
    for w in GPU_WORKLOADS:
        planned = [c for c in plan_candidates(w, profile) if c.runnable]
        for r in measure_attention(w, planned, device="cuda", profile=profile, timing=timing):
            if r.ok and r.stats:
                fresh[(r.workload_key, r.backend, r.tactic)] = r.stats.median_us
    ratios = {key: rec.stats.median_us / fresh[key] for key, rec in stored.items() if rec.stats and key in fresh}
    assert {b for _, b, _ in ratios} >= {"FLASHINFER", "TORCH_SDPA", "FLEX_ATTENTION", "HWTUNE_TRITON_ATTN"} & {
        b for _, b, _ in stored
    }
    off = {f"{k[1]}/{k[2]} {k[0][:60]}": round(v, 3) for k, v in ratios.items() if abs(v - 1) > GPU_AGREEMENT}
    assert not off, f"stored / fresh bench beyond {GPU_AGREEMENT:.0%}: {off}"
