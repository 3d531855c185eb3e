"""Which refinement points are worth measuring first: those between coarse points whose winners differ.

A budget-limited run measures the coarse grid first (it bounds every region), then the refinement points
ordered by how much they can change a decision: a point whose nearest coarse neighbours (same kind, phase
and query length) were won by different candidates sits on a crossover and is measured first; a point
whose neighbours agree is measured last, if time remains.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from hwtune.core.records import MeasurementRecord
from hwtune.tuner.plan import PlanItem


def winners(records: Iterable[MeasurementRecord]) -> dict[str, tuple[str, str, float]]:
    """Fastest ok (backend, tactic, median) per workload key."""
    best: dict[str, tuple[str, str, float]] = {}
    for r in records:
        if r.status != "ok" or r.stats is None:
            continue
        cur = best.get(r.workload_key)
        if cur is None or r.stats.median_us < cur[2]:
            best[r.workload_key] = (r.backend, r.tactic, r.stats.median_us)
    return best


def _coords(item: PlanItem) -> tuple[tuple, float, float]:
    """(group, log batch, log context): points are only compared within their group."""
    w = item.workload
    if item.kind == "all2all":
        return ("all2all", w.spec.key()), math.log2(w.tokens_per_rank), 0.0  # type: ignore[union-attr]
    group = ("attention", w.spec.key(), w.phase, w.query_len if w.phase != "decode" else 0)  # type: ignore[union-attr]
    return group, math.log2(w.batch), math.log2(w.context_len)  # type: ignore[union-attr]


def informative(item: PlanItem, coarse: Sequence[PlanItem], won: dict[str, tuple[str, str, float]]) -> bool:
    """True when the item's nearest coarse neighbours disagree on the winner, or one is unmeasured."""
    group, x, y = _coords(item)
    near = sorted(
        (c for c in coarse if _coords(c)[0] == group),
        key=lambda c: (_coords(c)[1] - x) ** 2 + (_coords(c)[2] - y) ** 2,
    )[:4]
    if len(near) < 2:
        return True
    seen = {won.get(c.key, (None, None, 0.0))[:2] for c in near}
    return len(seen) > 1 or (None, None) in seen


def order_refinements(
    refine: Sequence[PlanItem], coarse: Sequence[PlanItem], records: Iterable[MeasurementRecord]
) -> list[PlanItem]:
    """Refinement items, crossover points first (stable order within each class)."""
    won = winners(records)
    flagged = [(not informative(i, coarse, won), n) for n, i in enumerate(refine)]
    return [refine[n] for _, n in sorted(flagged)]
