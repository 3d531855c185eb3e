"""Ranks agree: inside a torch.distributed group every rank returns the same choice, or every rank raises.

Three CPU gloo processes (tests/selector/ranks_worker.py), each selecting from its own SQLite store whose
measurements make its own answer differ from the others'. The ranks run every scenario once (module
fixture, ~20 s); collectives time out after 20 s and the launcher kills ranks after 240 s, so a hang fails.
"""

from __future__ import annotations

import pickle
import sys

import pytest

from tests.selector import ranks_worker
from tests.selector.ranks_worker import WORLD

pytest.importorskip("torch.distributed")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    return ranks_worker.launch(tmp_path_factory.mktemp("ranks"))


def scenario(ranks: list[dict], name: str) -> list[dict]:
    got = [r.get(name) for r in ranks]
    assert all(g is not None for g in got), f"{name} did not finish on every rank: {got}"
    return got


def ok(ranks: list[dict], name: str) -> list[dict]:
    got = scenario(ranks, name)
    assert all(g["ok"] for g in got), f"{name} raised: {[g.get('traceback') or g for g in got]}"
    return got


def test_without_agreement_the_ranks_stores_make_them_choose_differently(ranks) -> None:
    """The premise of the other tests, and the opt-out: distributed=False returns each rank's own answer."""
    local = ok(ranks, "local")
    assert [g["backend"] for g in local] == ["deepep_low_latency", "naive", "flashinfer_nvlink_two_sided"]
    assert not any(n.startswith(("ranks ", "this rank")) for g in local for n in g["notes"])


def test_every_rank_returns_rank0s_choice_and_notes_the_disagreement(ranks) -> None:
    local, agreed = ok(ranks, "local"), ok(ranks, "use_rank0")
    assert [g["digest"] for g in agreed] == [local[0]["digest"]] * WORLD  # backend, tactics, per phase, dispatch
    assert all(g["backend"] == "deepep_low_latency" for g in agreed)
    for rank, g in enumerate(agreed):
        assert any(n.startswith("ranks disagreed (rank 1 chose naive") for n in g["notes"]), g["notes"]
        mine = [n for n in g["notes"] if n.startswith(f"this rank (rank {rank}) would have chosen")]
        assert bool(mine) == (rank != 0), g["notes"]
    assert any("backend naive here, deepep_low_latency on rank 0" in n for n in agreed[1]["notes"])
    assert any("dispatch table of 0 cells here, 9 on rank 0" in n for n in agreed[2]["notes"])


def test_warm_calls_agree_too(ranks) -> None:
    """The local selection is cached; the agreement runs on every call, so warm calls still agree."""
    warm, first = ok(ranks, "warm"), ok(ranks, "use_rank0")
    assert [g["digest"] for g in warm] == [first[0]["digest"]] * WORLD
    assert all(g["warm_ms"] < 1000 for g in warm)


def test_attention_agrees_and_only_differing_ranks_say_what_differed(ranks) -> None:
    local, agreed = ok(ranks, "attention_local"), ok(ranks, "attention")
    assert len({g["digest"] for g in local}) == WORLD  # ranks 0 and 2: same backend, other tactics
    assert [g["digest"] for g in agreed] == [local[0]["digest"]] * WORLD
    assert all(g["backend"] == "FLASHINFER" for g in agreed)
    assert any("differs in backend FLASH_ATTN here, FLASHINFER on rank 0" in n for n in agreed[1]["notes"])
    tactics = [n for n in agreed[2]["notes"] if "would have chosen" in n]
    assert tactics and "differs in tactics" in tactics[0] and "backend" not in tactics[0].split("differs in")[1]


def test_ranks_that_agree_keep_their_answer_with_a_note(ranks) -> None:
    agreed = ok(ranks, "agree")
    assert len({g["digest"] for g in agreed}) == 1 and agreed[0]["backend"] == "FLASH_ATTN"
    for g in agreed:
        assert any(n.startswith(f"ranks agree: all {WORLD} ranks") for n in g["notes"]), g["notes"]
        assert not any("disagreed" in n or "would have chosen" in n for n in g["notes"])


def test_raise_mode_fails_every_rank_with_each_ranks_choice(ranks) -> None:
    for g in scenario(ranks, "raise"):
        assert not g["ok"] and g["type"] == "RanksDisagreeError", g
        assert "on_disagreement='raise'" in g["message"]
        assert "rank 1: naive" in g["message"] and "rank 2: flashinfer_nvlink_two_sided" in g["message"]
        assert "on_disagreement='use_rank0'" in g["message"]  # a way out


@pytest.mark.parametrize("name, failing", [("rank0_fails", 0), ("other_rank_fails", 2)])
def test_a_failing_rank_makes_every_rank_raise_instead_of_hang(ranks, name: str, failing: int) -> None:
    for rank, g in enumerate(scenario(ranks, name)):
        assert not g["ok"], g
        if rank == failing:  # its own error, as without a group
            assert g["type"] == "NoValidBackendError" and "multi-head latent attention" in g["message"]
        else:
            assert g["type"] == "RanksDisagreeError", g
            assert f"backend selection failed on rank {failing} of the process group" in g["message"]
            assert f"rank {failing}: NoValidBackendError: No attention backend" in g["message"]


def test_different_questions_fail_every_rank_naming_the_difference(ranks) -> None:
    for g in scenario(ranks, "different_specs"):
        assert g["type"] == "RanksDisagreeError" and "num_kv_heads=4 (rank 0: 8)" in g["message"], g
    for g in scenario(ranks, "different_modes"):
        assert g["type"] == "RanksDisagreeError", g
        assert "rank 2: on_disagreement='raise' (rank 0: 'use_rank0')" in g["message"]


def test_rank0s_choice_invalid_on_another_rank_fails_every_rank(ranks) -> None:
    for g in scenario(ranks, "not_valid_on_a_rank"):
        assert g["type"] == "RanksDisagreeError", g
        assert "rank 1 on cpu (CPU) cannot use FLASH_ATTN" in g["message"]


def test_explicit_group_and_nccl_world_use_a_cpu_group(ranks) -> None:
    want = ok(ranks, "use_rank0")[0]["digest"]
    assert [g["digest"] for g in ok(ranks, "explicit_group")] == [want] * WORLD
    nccl = ok(ranks, "nccl_world")
    assert [g["digest"] for g in nccl] == [want] * WORLD and all(g["made_gloo_group"] for g in nccl)


def test_an_nccl_subgroup_is_refused_with_the_way_out(ranks) -> None:
    for g in scenario(ranks, "nccl_subgroup"):
        assert g["type"] == "ValueError" and "hwtune never initialises CUDA" in g["message"], g
        assert "new_group(ranks, backend='gloo')" in g["message"]


# In-process: no process group here.


def test_without_a_group_the_call_is_local_and_imports_nothing(monkeypatch) -> None:
    import hwtune
    from hwtune.selector.ranks import agree

    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)  # as in an engine without torch
    calls = []
    sel = hwtune.select_attention(ranks_worker.ATTN, device="h100", assume_installed=True, db=False)
    assert agree(lambda: calls.append(1) or sel) is sel and calls == [1]
    assert "torch.distributed" not in sys.modules
    with pytest.raises(ValueError, match="'use_rank0' makes every rank use rank 0's choice"):
        agree(lambda: sel, on_disagreement="first")


def test_selection_pickles_and_the_digest_covers_what_drives_the_engine() -> None:
    import dataclasses

    import hwtune
    from hwtune.selector.ranks import _differences, digest
    from hwtune.selector.selection import DispatchEntry

    sel = hwtune.select_attention(ranks_worker.ATTN, device="h100", assume_installed=True, db=False)
    cells = (DispatchEntry("decode", 16, 4096, "fa3", 12.0, "measured"),)
    sel = dataclasses.replace(sel, dispatch=cells, per_phase={"decode": "FLASH_ATTN"})
    back = pickle.loads(pickle.dumps(sel))
    assert back == sel and back._table == sel._table and back.tactic_for("decode", 8, 1000) == "fa3"
    slower = dataclasses.replace(sel, dispatch=(dataclasses.replace(cells[0], latency_us=99.0),))
    assert digest(slower) == digest(sel)  # estimates drive nothing
    for changed in (
        dataclasses.replace(sel, dispatch=(dataclasses.replace(cells[0], tactic="fa2"),)),
        dataclasses.replace(sel, tactics={**sel.tactics, "prefill": "fa2"}),
        dataclasses.replace(sel, per_phase={"decode": "FLASHINFER"}),
        dataclasses.replace(sel, backend="FLASHINFER"),
        dataclasses.replace(sel, phase_dispatch=(dataclasses.replace(cells[0], tactic="xqa"),)),
    ):
        assert digest(changed) != digest(sel)
    routed = dataclasses.replace(sel, phase_dispatch=(dataclasses.replace(cells[0], tactic="xqa"),))
    assert pickle.loads(pickle.dumps(routed))._phase_table == routed._phase_table
    assert "routed phases' dispatch table" in _differences(routed, sel)
