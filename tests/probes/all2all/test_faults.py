"""Fault handling: a crash, a hang or a silent exit on one rank ends the whole group with the right status."""

from __future__ import annotations

import os
import time

from hwtune.probes.all2all.launcher import run_trial
from hwtune.probes.all2all.measure import measure_all2all, measure_all2all_sweep
from hwtune.probes.all2all.trial import TrialItem, TrialSpec
from tests.probes.all2all.conftest import CHILD_ENV, FAULTY, spec, wl

REF = "allgather_reducescatter"


def _group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_segfault_on_one_rank_is_crashed_with_the_signal(fast: dict) -> None:
    [r] = measure_all2all(wl(8), [REF], **fast, candidate_refs={REF: f"{FAULTY}:SegfaultOnRank1"})
    assert r.status == "crashed" and r.stats is None
    assert r.message.startswith("rank 1 was killed by signal 11 (SIGSEGV) during workload 0")
    assert "Segmentation fault" in r.message  # faulthandler's report, from rank 1's stderr


def test_hang_times_out_within_the_limit_and_kills_the_group() -> None:
    trial = TrialSpec(
        backend=REF,
        candidate_ref=f"{FAULTY}:HangOnRank1",
        spec=spec().to_dict(),
        items=(TrialItem(8),),
        device="cpu",
        world_size=2,
        time_cap_s=0.05,
    )
    t0 = time.monotonic()
    out = run_trial(trial, timeout_s=6, env=CHILD_ENV)
    took = time.monotonic() - t0
    [res] = out.results
    assert res.status == "timeout" and "no result within 6 s" in res.message
    assert "killed" in res.message and res.extra["waiting_ranks"]
    assert 6 <= took < 12
    assert out.pids and all(_group_gone(pid) for pid in out.pids)


def test_rank_exiting_without_a_result_is_crashed(fast: dict) -> None:
    [r] = measure_all2all(wl(8), [REF], **fast, candidate_refs={REF: f"{FAULTY}:SilentExitOnRank1"})
    assert r.status == "crashed"
    assert r.message.startswith("rank 1 exited (code 0) without a result during workload 0")


def test_error_on_one_rank_ends_the_group_and_a_fresh_one_continues(fast: dict) -> None:
    records = measure_all2all_sweep(
        [wl(8), wl(16)], [REF], **fast, candidate_refs={REF: f"{FAULTY}:RaisesOnFirstWorkload"}
    )
    first, second = records
    assert first.status == "error" and "simulated kernel failure on rank 0" in first.message
    assert first.extra["rank"] == 0 and first.extra["stage"].startswith("workload 0 (8 tokens")
    assert second.status == "ok" and second.extra["groups_spawned"] == 2


def test_setup_refusal_is_unsupported_for_every_workload(fast: dict) -> None:
    records = measure_all2all_sweep([wl(8), wl(16)], [REF], **fast, candidate_refs={REF: f"{FAULTY}:RefusesSetup"})
    assert [r.status for r in records] == ["unsupported", "unsupported"]
    assert all("needs a frobnicator" in r.message for r in records)
    assert all(r.extra["groups_spawned"] == 1 for r in records)


def test_the_first_rank_to_fail_decides_not_its_peers_later_connection_error(fast: dict) -> None:
    # Rank 1 refuses set-up and exits; rank 0, waiting in a collective with it, fails afterwards. Both
    # reports arrive within the settling time, which once made this "ranks disagreed" (an error).
    records = measure_all2all_sweep(
        [wl(8), wl(16)], [REF], **fast, candidate_refs={REF: f"{FAULTY}:RefusesSetupOnRank1WhilePeerWaits"}
    )
    assert [r.status for r in records] == ["unsupported", "unsupported"], records[0].message
    assert all(r.message == "rank 1 lacks a frobnicator" and r.extra["rank"] == 1 for r in records)
    assert all(r.extra["groups_spawned"] == 1 for r in records)


def test_a_rank_dying_after_its_last_result_keeps_the_agreed_results(fast: dict) -> None:
    records = measure_all2all_sweep(
        [wl(8), wl(16)], [REF], **fast, candidate_refs={REF: f"{FAULTY}:ExitsInTheFinalBarrierOnRank1"}
    )
    assert [r.status for r in records] == ["ok", "ok"], records[0].message
    assert all(r.extra["groups_spawned"] == 1 for r in records)
    for r in records:  # rank 0 may fail too (its barrier lost its peer) or be killed: it is not asserted on
        note = r.extra["after_last_workload"]
        assert note.startswith("after every workload had its result, not every rank finished:")
        assert "rank 1 exited with code 0" in note
