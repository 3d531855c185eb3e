"""Ranks must never disagree on the all2all backend: ranks that pick different ones deadlock.

Each rank may time candidates a little differently (its own clock, its own neighbours). So the choice is
made from timings *reduced across ranks*: a backend's cost is its slowest rank's time (the collective is
only as fast as that rank), a backend that failed or was not measured on any rank is out, and ties break by
name. Every rank computes the same function of the same gathered data, then rank 0's choice is broadcast
and checked, so even a bug in that function could not split the ranks silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class NoCommonBackendError(RuntimeError):
    """No backend was measured successfully on every rank."""


def reduce_timings(timings_by_rank: Mapping[int, Mapping[str, float | None]]) -> dict[str, float]:
    """Per backend, the slowest rank's time; backends missing, failed (None) or non-finite on any rank are
    dropped."""
    ranks = list(timings_by_rank.values())
    if not ranks:
        return {}
    names = set(ranks[0])
    for t in ranks[1:]:
        names &= set(t)
    out: dict[str, float] = {}
    for name in names:
        values = [t[name] for t in ranks]
        if all(v is not None and math.isfinite(v) and v >= 0 for v in values):
            out[name] = max(float(v) for v in values)  # type: ignore[arg-type]
    return out


def choose_backend(timings_by_rank: Mapping[int, Mapping[str, float | None]]) -> str:
    """The backend with the lowest slowest-rank time (ties: alphabetical). Deterministic in its input."""
    reduced = reduce_timings(timings_by_rank)
    if not reduced:
        raise NoCommonBackendError(
            "no all2all backend was measured successfully on every rank, so the ranks cannot agree on one; "
            "check each rank's measurements (a backend that failed on any rank is excluded)"
        )
    return min(reduced, key=lambda name: (reduced[name], name))


def choose_backend_collectively(local_timings: Mapping[str, float | None], *, group: Any = None) -> str:
    """Gather every rank's timings, choose with :func:`choose_backend`, and return the choice every rank
    holds (rank 0's, broadcast and checked). Call it on every rank of ``group``."""
    import torch.distributed as dist

    size = dist.get_world_size(group)
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, dict(local_timings), group=group)
    mine = choose_backend({r: t for r, t in enumerate(gathered)})
    root = [mine]
    dist.broadcast_object_list(root, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if root[0] != mine:
        raise RuntimeError(
            f"rank {dist.get_rank(group)} chose {mine} but rank 0 chose {root[0]} from the same "
            "timings; refusing to continue with ranks in disagreement"
        )
    return str(root[0])
