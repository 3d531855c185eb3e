"""Every rank ends with the same backend, even when each rank's own timings would pick another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwtune.probes.all2all.agreement import NoCommonBackendError, choose_backend, reduce_timings
from hwtune.probes.all2all.launcher import free_port

# Each rank alone would choose differently: rank 0 -> a, rank 1 -> c, rank 2 -> c.
LOCAL = {
    0: {"a": 10.0, "b": 12.0, "c": None},
    1: {"a": 15.0, "b": 11.0, "c": 1.0},
    2: {"a": 9.0, "b": 13.0, "c": 2.0},
}


def test_reduction_uses_the_slowest_rank_and_drops_failures() -> None:
    assert reduce_timings(LOCAL) == {"a": 15.0, "b": 13.0}
    assert choose_backend(LOCAL) == "b"
    assert choose_backend({0: {"x": 1.0, "y": 1.0}, 1: {"x": 2.0, "y": 2.0}}) == "x"  # ties: by name
    assert choose_backend({0: {"a": 1.0, "b": 2.0}, 1: {"b": 2.0}}) == "b"  # a missing on rank 1
    with pytest.raises(NoCommonBackendError, match="every rank"):
        choose_backend({0: {"a": None}, 1: {"a": 1.0}})
    with pytest.raises(NoCommonBackendError):
        choose_backend({0: {"a": float("nan")}})


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from hwtune.probes.all2all.agreement import choose_backend_collectively

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    try:
        choice = choose_backend_collectively(LOCAL[rank])
    finally:
        dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(
        json.dumps(
            {
                "choice": choice,
                "alone": min((k for k, v in LOCAL[rank].items() if v is not None), key=lambda k: LOCAL[rank][k]),
            }
        )
    )


def test_ranks_with_different_timings_choose_the_same_backend(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(free_port(), str(tmp_path)), nprocs=3, join=True)
    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    assert {g["choice"] for g in got} == {"b"}
    assert {g["alone"] for g in got} == {"a", "c"}, "alone, the ranks would have disagreed"
