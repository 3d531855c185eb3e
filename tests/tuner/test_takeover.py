"""A run never waits in silence for work that nobody does: items held by a process of this host that is gone are
taken over at once; items held by a live process are waited for with what and how long said; a second `tune` of a
plan in progress joins it; a finished plan says exactly what to do."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.environment import current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.store import Store
from hwtune.tuner.options import TuneOptions
from hwtune.tuner.plan import Plan, PlanItem
from hwtune.tuner.run import Tuner, holder_is_gone, plan_queue_id

SPEC = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, dtype="float32", kv_layout="NHD")
PLAN = Plan(
    name="takeover",
    items=[PlanItem(AttentionWorkload(SPEC, "decode", b, 64, query_len=1), 0) for b in (1, 2)],
    time_cap_s=0.05,
    backends=("TORCH_SDPA:math",),
)


def _opts(**kw) -> TuneOptions:
    return TuneOptions(device="cpu", warmup=False, **kw)


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


def _hold(store: Store, worker: str, lease_s: float, n: int = 1) -> str:
    """Enqueue the plan as a run would and let ``worker`` claim ``n`` items; returns the queue id."""
    queue_id = plan_queue_id(PLAN, current_environment(CPU_PROFILE))
    store.enqueue(queue_id, [(i.key, i.to_dict()) for i in PLAN.items])
    assert len(store.claim(queue_id, worker, n, lease_s)) == n
    return queue_id


def test_holder_is_gone_only_for_a_dead_process_of_this_host() -> None:
    host = socket.gethostname()
    assert holder_is_gone(f"{host}:{_gone_pid()}:abc")
    assert not holder_is_gone(f"{host}:{os.getppid()}:abc")  # alive
    assert not holder_is_gone(f"{host}:{os.getpid()}:abc")  # this process
    assert not holder_is_gone(f"another-host:{_gone_pid()}:abc")  # its lease decides
    assert not holder_is_gone("garbage")


def test_resume_takes_over_a_dead_process_lease_at_once(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        dead = f"{socket.gethostname()}:{_gone_pid()}:dead01"
        queue_id = _hold(store, dead, lease_s=600)  # without a takeover this run would wait ten minutes
        started = time.monotonic()
        report = Tuner(PLAN, store, _opts(resume=True), profile=CPU_PROFILE).run()
        assert time.monotonic() - started < 120
        assert report.state == "done" and store.queue_state(queue_id)["done"] == 2
        assert any(f"took over 1 item(s) of {dead}" in n for n in report.notes), report.notes


def test_a_live_holder_is_waited_for_with_what_and_how_long(tmp_path: Path) -> None:
    said: list[str] = []
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        live = f"{socket.gethostname()}:{os.getppid()}:live01"
        queue_id = _hold(store, live, lease_s=3, n=2)  # nothing left to claim: the run must wait
        report = Tuner(
            PLAN, store, _opts(resume=True), profile=CPU_PROFILE, progress=lambda e, d, t, m: said.append(m)
        ).run()
        assert report.state == "done" and store.queue_state(queue_id)["done"] == 2
    waits = [m for m in said if m.startswith("waiting for")]
    assert waits and f"held by {live}" in waits[0] and "lease ends in" in waits[0], said


def test_a_second_tune_of_a_plan_in_progress_joins_it(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 't.db'}") as store:
        live = f"{socket.gethostname()}:{os.getppid()}:live02"
        _hold(store, live, lease_s=2)
        report = Tuner(PLAN, store, _opts(), profile=CPU_PROFILE).run()  # no --resume: joins, does not refuse
        assert report.state == "done"
        assert any("joined a run of this plan in progress" in n for n in report.notes), report.notes
        with pytest.raises(InvalidSpecError, match="no process is running it now; add --resume"):
            Tuner(PLAN, store, _opts(), profile=CPU_PROFILE).run()  # finished: says exactly what to do
