"""`hwtune tune` on CPU: stored as measured, resumable after SIGKILL without duplicates, budgets, shared queues."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.errors import InvalidSpecError
from hwtune.db.store import Store
from hwtune.tuner.plan_file import plan_from_toml
from hwtune.tuner.run import TuneOptions, Tuner

PLAN = """
name = "cpu-test"
time_cap_s = 0.05
[[attention]]
num_heads = 4
num_kv_heads = 2
head_size = 32
dtype = "float32"
kv_layout = "NHD"
backends = ["TORCH_SDPA:math"]
[[attention.decode]]
batch = [1, 4]
context = [64, 256]
[[attention.decode]]
batch = [2]
context = [128]
level = 1
[[attention.prefill]]
chunk = [32]
prefix = [0]
"""


@pytest.fixture()
def plan_file(tmp_path: Path) -> Path:
    f = tmp_path / "plan.toml"
    f.write_text(PLAN)
    return f


def opts(**kw):
    return TuneOptions(device="cpu", warmup=False, **kw)


def test_tune_stores_every_result_and_refuses_a_silent_rerun(tmp_path: Path, plan_file: Path) -> None:
    plan = plan_from_toml(plan_file)
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        report = Tuner(plan, store, opts(), profile=CPU_PROFILE).run()
        assert report.state == "done" and report.items_done == 6 and report.statuses == {"ok": 6}
        recs = store.measurements(run_id=report.run_id)
        assert len(recs) == 6 and all(r.extra["plan_id"] == report.plan_id for r in recs)
        walls = [r.extra["wall_s"] for r in recs]  # each job's wall time, kept with its record
        assert all(w > 0 for w in walls) and list(report.backend_s) == ["TORCH_SDPA"]
        assert report.backend_s["TORCH_SDPA"] == pytest.approx(sum(walls)) and sum(walls) <= report.elapsed_s
        with pytest.raises(InvalidSpecError, match="--resume"):
            Tuner(plan, store, opts(), profile=CPU_PROFILE).run()
        again = Tuner(plan, store, opts(resume=True), profile=CPU_PROFILE).run()
        assert again.items_done == 0 and again.records == 0  # nothing left to do, nothing repeated
        fresh = Tuner(plan, store, opts(fresh=True), profile=CPU_PROFILE).run()
        assert fresh.records == 6


def test_budget_measures_the_coarse_grid_first(tmp_path: Path, plan_file: Path) -> None:
    plan = plan_from_toml(plan_file)
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        # 1 s: the first item starts at once; its own time (a worker start-up alone is over 0.5 s) plus the
        # same again estimated for the next exceeds the budget, so the run stops after it
        report = Tuner(plan, store, opts(budget_s=1.0), profile=CPU_PROFILE).run()
        assert report.state == "interrupted" and report.items_done == 1
        assert any("budget" in n and "--resume" in n for n in report.notes)
        first = store.measurements(run_id=report.run_id)[0]
        assert first.workload["batch"] != 2  # the level-1 refinement point is never first
        rest = Tuner(plan, store, opts(resume=True), profile=CPU_PROFILE).run()
        assert rest.items_done == 5 and rest.state == "done"


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db) as c:
            return c.execute("select count(*) from measurements").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_sigkill_then_resume_repeats_nothing(tmp_path: Path, plan_file: Path) -> None:
    db = tmp_path / "t.db"
    cmd = [
        sys.executable,
        "-m",
        "hwtune",
        "tune",
        "--plan",
        str(plan_file),
        "--kinds",
        "attention",
        "--device",
        "cpu",
        "--db",
        f"sqlite:///{db}",
        "--no-warmup",
        "--lease",
        "3",
        "--json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while _count(db) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its worker, mid-run
    proc.wait()
    killed_at = _count(db)
    assert 2 <= killed_at < 6
    out = subprocess.run(cmd[:-1] + ["--resume", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["state"] == "done"
    with Store.open(f"sqlite:///{db}", read_only=True, create=False) as store:
        recs = store.measurements()
    per_candidate = Counter((r.workload_key, r.backend, r.tactic) for r in recs)
    assert len(per_candidate) == 6 and set(per_candidate.values()) == {1}  # every item once, no duplicates


def test_two_nodes_share_one_plan(shared_url: str, plan_file: Path) -> None:
    """Two tuners on one store (SQLite, and PostgreSQL with SKIP LOCKED) split the plan: each item once."""
    cmd = [
        sys.executable,
        "-m",
        "hwtune",
        "tune",
        "--plan",
        str(plan_file),
        "--kinds",
        "attention",
        "--device",
        "cpu",
        "--db",
        shared_url,
        "--no-warmup",
        "--json",
        "--resume",
    ]
    Store.open(shared_url).close()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reports = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert sum(r["items_done"] for r in reports) == 6
    with Store.open(shared_url, read_only=True, create=False) as store:
        recs = store.measurements()
    assert len(recs) == 6 and len({(r.workload_key, r.backend, r.tactic) for r in recs}) == 6


def test_tune_plans_for_a_named_device_and_refuses_to_measure_one_it_lacks(tmp_path: Path) -> None:
    """``--device H100 --dry-run`` plans for an H100 (as the README promises); without --dry-run measuring needs the
    device, and says so (exit 2); an unknown name lists the known ones instead of tuning the CPU."""
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    db = ["--db", f"sqlite:///{tmp_path / 't.db'}", "--kinds", "attention"]
    planned = CliRunner().invoke(app, ["tune", "--quick", "--dry-run", "--device", "H100", "--json", *db])
    assert planned.exit_code == 0, planned.output
    assert "H100" in json.loads(planned.stdout)["device"] and "simulated" in json.loads(planned.stdout)["device"]
    refused = CliRunner().invoke(app, ["tune", "--quick", "--device", "sm100", *db])
    assert refused.exit_code == 2, refused.output
    assert "measuring needs that device" in refused.output and "--dry-run" in refused.output
    assert "Traceback" not in refused.output and not (tmp_path / "t.db").exists()
    unknown = CliRunner().invoke(app, ["tune", "--quick", "--dry-run", "--device", "H1000", *db])
    assert unknown.exit_code == 2 and "unknown device 'H1000'" in unknown.output and "sm100" in unknown.output


def test_a_tune_that_measures_nothing_says_why_and_fails(tmp_path: Path) -> None:
    """Every candidate unsupported here (a GPU-only backend on the CPU): exit 1 with the reasons, not 0."""
    model = Path(__file__).resolve().parents[1] / "data" / "models" / "llama-3.1-8b.json"
    cmd = [
        sys.executable,
        "-m",
        "hwtune",
        "tune",
        "--model",
        str(model),
        "--quick",
        "--kinds",
        "attention",
        "--device",
        "cpu",
        "--backends",
        "FLASHINFER",
        "--db",
        f"sqlite:///{tmp_path / 't.db'}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "measured nothing" in res.stderr and "FLASHINFER" in res.stderr and "Traceback" not in res.stderr


def test_a_run_narrowed_to_other_backends_is_another_queue(tmp_path: Path) -> None:
    """Tuning a plan with --backends A, then with --backends B, must measure B (not refuse, not skip it)."""
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.tuner.plan import Plan, PlanItem

    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, dtype="float32")
    plan = Plan(
        name="narrowed", items=[PlanItem(AttentionWorkload(spec, "decode", 2, 64, query_len=1), 0)], time_cap_s=0.05
    )
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        first = Tuner(plan, store, opts(backends=("TORCH_SDPA:math",)), profile=CPU_PROFILE).run()
        second = Tuner(plan, store, opts(backends=("FLEX_ATTENTION",)), profile=CPU_PROFILE).run()
        assert first.plan_id != second.plan_id and second.state == "done"
        measured = {(r.backend, r.tactic) for r in store.measurements(run_id=second.run_id)}
    assert measured == {("FLEX_ATTENTION", "compiled")}
    changed = Plan(name="narrowed", items=plan.items, time_cap_s=0.5)
    assert changed.digest() != plan.digest(), "the timing cap is part of the plan"


PRUNE_PLAN = """
name = "prune-test"
time_cap_s = 0.05
[[attention]]
num_heads = 4
num_kv_heads = 2
head_size = 32
dtype = "float32"
kv_layout = "NHD"
backends = ["TORCH_SDPA:math", "FLEX_ATTENTION"]
[[attention.decode]]
batch = [1]
context = [64, 256]
[[attention.decode]]
batch = [1]
context = [128]
level = 1
"""


def test_a_candidate_far_behind_is_not_measured_at_refinement_points(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """FLEX (faked 20x slower than SDPA at both coarse points) is measured there, not at the refinement point between
    them, and the report says so (schedule.pruned)."""
    from hwtune.core.records import LatencyStats, MeasurementRecord
    from hwtune.tuner import run as run_module

    f = tmp_path / "plan.toml"
    f.write_text(PRUNE_PLAN)
    latency = {"TORCH_SDPA": 10.0, "FLEX_ATTENTION": 200.0}
    tuner_env = {}

    def fake_measure(w, planned, *, on_record, run_id, **_kw):  # noqa: ANN001, ANN202
        env = tuner_env["env"]
        for c in planned:
            stats = LatencyStats.from_samples([latency[c.backend] * w.context_len / 64])
            rec = MeasurementRecord("attention", w.to_dict(), w.key(), c.backend, c.tactic, "ok", stats=stats)
            rec.environment, rec.environment_hash, rec.run_id, rec.host = env.fingerprint(), env.hash(), run_id, "h"
            on_record(rec)

    monkeypatch.setattr(run_module, "measure_attention", fake_measure)
    with Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        tuner = Tuner(plan_from_toml(f), store, opts())
        tuner_env["env"] = tuner.env
        report = tuner.run()
        measured = Counter((r.backend, r.workload["context_len"]) for r in store.measurements("attention"))
    assert measured == Counter({("TORCH_SDPA", 64): 1, ("TORCH_SDPA", 256): 1, ("TORCH_SDPA", 128): 1,
                                ("FLEX_ATTENTION", 64): 1, ("FLEX_ATTENTION", 256): 1})  # fmt: skip
    assert any("FLEX_ATTENTION/compiled at 1 point(s)" in n for n in report.notes), report.notes


def test_a_backend_that_cannot_serve_the_other_layer_kind_is_recorded_not_timed(tmp_path: Path) -> None:
    """A model with 64-token windowed and full-attention layers: TORCH_SDPA has no sliding window, so on the
    full-attention layers it is stored unsupported with that reason (the engine runs one backend for every layer);
    the same items in a plan of one layer kind are timed."""
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.tuner.plan import Plan, PlanItem

    full = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, dtype="float32", kv_layout="NHD")
    items = [PlanItem(AttentionWorkload(full, "decode", batch=b, context_len=128)) for b in (1, 2)]
    for windows, status in (((64, None), "unsupported"), ((), "ok")):
        plan = Plan(name="layers", items=items, time_cap_s=0.05, backends=("TORCH_SDPA:math",), layer_windows=windows)
        with Store.open(f"sqlite:///{tmp_path / f'{status}.db'}") as store:
            report = Tuner(plan, store, opts(), profile=CPU_PROFILE).run()
            recs = store.measurements(run_id=report.run_id)
        assert [r.status for r in recs] == [status, status], [r.message for r in recs]
        if status == "unsupported":
            assert all("cannot serve this model's 64-token sliding-window layers" in r.message for r in recs)
            assert all("TORCH_SDPA does not support it" in r.message for r in recs)


def test_stale_timings_of_a_backend_the_plan_refuses_do_not_call_for_bisection(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A store from before the layer-kind rule holds TORCH_SDPA timings at a mixed model's full-attention points
    (fastest at 64 tokens, slowest at 4096). This plan refuses TORCH_SDPA there (no sliding window), so FLEX_ATTENTION
    wins both ends and nothing crosses over: no point is bisected between them (the stale records would add some)."""
    from hwtune.core.records import LatencyStats, MeasurementRecord
    from hwtune.core.types import AttentionSpec, AttentionWorkload
    from hwtune.tuner import run as run_module
    from hwtune.tuner.plan import Plan, PlanItem

    full = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, dtype="float32", kv_layout="NHD")
    ends = [AttentionWorkload(full, "decode", batch=1, context_len=c) for c in (64, 4096)]
    plan = Plan(
        name="stale", items=[PlanItem(w) for w in ends], time_cap_s=0.05,
        backends=("TORCH_SDPA:math", "FLEX_ATTENTION"), layer_windows=(64, None),
    )  # fmt: skip
    state = {}

    def record(w, backend, tactic, status, us, run_id):  # noqa: ANN001, ANN202
        stats = LatencyStats.from_samples([us]) if status == "ok" else None
        rec = MeasurementRecord("attention", w.to_dict(), w.key(), backend, tactic, status, stats=stats)
        env = state["env"]
        rec.environment, rec.environment_hash, rec.run_id, rec.host = env.fingerprint(), env.hash(), run_id, "h"
        return rec

    def fake_measure(w, planned, *, on_record, run_id, **_kw):  # noqa: ANN001, ANN202
        for c in planned:
            status = "ok" if c.runnable else "unsupported"
            on_record(record(w, c.backend, c.tactic, status, 10.0 * w.context_len / 64, run_id))

    monkeypatch.setattr(run_module, "measure_attention", fake_measure)
    with Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        tuner = Tuner(plan, store, opts(), profile=CPU_PROFILE)
        state["env"] = tuner.env
        store.write([record(w, "TORCH_SDPA", "math", "ok", us, "old") for w, us in zip(ends, (1.0, 1000.0))])
        report = tuner.run()
        contexts = {r.workload["context_len"] for r in store.measurements("attention")}
        statuses = Counter((r.backend, r.status) for r in store.measurements(run_id=report.run_id))
    assert report.state == "done" and contexts == {64, 4096}, (contexts, report.notes)
    assert not any("between neighbours" in n for n in report.notes), report.notes
    assert statuses[("TORCH_SDPA", "unsupported")] == 2  # this run recorded it refused, as the rule says
