"""Measuring a backend whose only rejection is its activation-dtype rule: only when a person names it (bench
``--backend``, tune ``--backends``), and then its correctness gate decides; the default plan never runs it. End to
end on CPU: tune stores the result and selection lifts the rule only after a pass.

The dtype-restricted backend here is ``naive`` made nvfp4-only (the one-sided NVLink kernel's rule), because the
real one-sided kernel needs two NVLink GPUs; the CPU ranks run the real naive candidate under gloo.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

import hwtune
from hwtune.cli import bench_all2all
from hwtune.core import catalogue
from hwtune.core.catalogue import All2AllRules
from hwtune.core.devices import CPU_PROFILE
from hwtune.db.store import Store
from hwtune.probes.all2all.measure import measure_all2all
from hwtune.selector.api import _cached
from hwtune.tuner.options import TuneOptions
from hwtune.tuner.plan import Plan, PlanItem
from hwtune.tuner.run import Tuner
from tests.probes.all2all.conftest import FAULTY, spec, wl
from tests.probes.all2all.test_measure_api import SMALL, _app


def _restrict(monkeypatch: pytest.MonkeyPatch, **rules: object) -> None:
    """Make the catalogue's naive record nvfp4-only (plus ``rules``), as the one-sided kernel's record is."""
    naive = catalogue.get("all2all", "naive")
    assert isinstance(naive.rules, All2AllRules)
    narrowed = dataclasses.replace(
        naive, rules=dataclasses.replace(naive.rules, quant_dtypes=frozenset({"nvfp4"}), **rules)
    )
    monkeypatch.setitem(
        catalogue._ALL, "all2all", tuple(narrowed if b.name == "naive" else b for b in catalogue._ALL["all2all"])
    )
    monkeypatch.setitem(catalogue._BY_NAME, ("all2all", "naive"), narrowed)
    _cached.cache_clear()


@pytest.fixture()
def nvfp4_only_naive(monkeypatch: pytest.MonkeyPatch):
    _restrict(monkeypatch)
    yield
    _cached.cache_clear()


def test_a_named_backend_is_measured_despite_its_dtype_rule_and_the_gate_decides(fast: dict, nvfp4_only_naive) -> None:
    [r] = measure_all2all(wl(8), ["naive"], named=["naive"], **fast)
    assert r.status == "ok", r.message
    assert r.extra["dtype_rule_tested"] is True and "accepts only nvfp4" in r.extra["catalogue_rejections"][0]
    assert "because it was named" in r.message and "correctness gate passed" in r.message
    assert r.error is not None and r.error["content_mismatch_rows"] == 0  # the gate ran


def test_unnamed_it_is_not_run(nvfp4_only_naive) -> None:
    [r] = measure_all2all(wl(8), ["naive"], device="cpu", timeout_s=30)
    assert r.status == "unsupported" and "accepts only nvfp4 activations; bf16 was asked" in r.message
    assert "groups_spawned" not in r.extra and "dtype_rule_tested" not in r.extra


def test_a_wrong_answer_keeps_the_rule_closed(fast: dict, nvfp4_only_naive) -> None:
    refs = {"naive": f"{FAULTY}:WrongCombineOnRank1"}
    [r] = measure_all2all(wl(8), ["naive"], named=["naive"], candidate_refs=refs, **fast)
    assert r.status == "wrong_answer" and r.stats is None
    assert "This wrong answer keeps the rule closed." in r.message


def test_a_named_backend_with_another_rejection_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    _restrict(monkeypatch, max_topk=1)  # the workload's top-k is 2: a second, unliftable rejection
    [r] = measure_all2all(wl(8), ["naive"], named=["naive"], device="cpu", timeout_s=30)
    assert r.status == "unsupported" and "supports top-k up to 1" in r.message
    assert "groups_spawned" not in r.extra
    _cached.cache_clear()


def test_bench_measures_a_named_backend_and_says_the_gate_decided_and_how_to_store_it(nvfp4_only_naive) -> None:
    args = ["bench", "all2all", "-b", "naive", "-t", "4", *SMALL, "--time-cap", "0.05", "--quant-dtype", "bf16"]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    assert "naive: measured in bf16 although the catalogue rejects that activation dtype" in res.output
    assert "because you named it; its correctness gate decided" in res.output
    assert "--kinds all2all --backends naive --quant-dtype bf16" in res.output
    assert bench_all2all._backends(["all"]) == (catalogue.names("all2all"), [])  # 'all' names nobody
    assert bench_all2all._backends(["naive,all"])[1] == ["naive"]


def _tune(url: str, backends: tuple[str, ...] | None) -> None:
    a2a = spec(ep=2, experts=4, topk=2, hidden=128, quant="bf16")
    from hwtune.core.types import All2AllWorkload

    plan = Plan(name="dtype-rule", items=[PlanItem(All2AllWorkload(a2a, 4), 0)], time_cap_s=0.05)
    with Store.open(url) as store:
        opts = TuneOptions(device="cpu", warmup=False, backends=backends, timeout_s=120)
        report = Tuner(plan, store, opts, profile=CPU_PROFILE).run()
        assert report.state == "done"


def _select(url: str):
    _cached.cache_clear()
    a2a = spec(ep=2, experts=4, topk=2, hidden=128, quant="bf16")
    return hwtune.select_all2all(a2a, device="cpu", db=url, distributed=False)


def test_end_to_end_only_a_named_stored_pass_lifts_the_rule(tmp_path: Path, nvfp4_only_naive) -> None:
    default_url = f"sqlite:///{tmp_path / 'default.db'}"
    _tune(default_url, None)  # the default plan: every backend, none named
    with Store.open(default_url) as store:
        naive = [r for r in store.measurements("all2all") if r.backend == "naive"]
    assert [r.status for r in naive] == ["unsupported"]
    assert "naive" in _select(default_url).rejected

    named_url = f"sqlite:///{tmp_path / 'named.db'}"
    _tune(named_url, ("naive",))  # hwtune tune --backends naive
    with Store.open(named_url) as store:
        [r] = store.measurements("all2all")
    assert r.backend == "naive" and r.status == "ok" and r.extra["dtype_rule_tested"] is True
    sel = _select(named_url)
    assert "naive" not in sel.rejected and sel.backend == "naive"
    assert any(
        "naive: the catalogue accepts only nvfp4 activations; that rule is lifted for bf16" in n for n in sel.notes
    )
