"""Which refinement points are worth measuring: first those between coarse points whose winners differ, then
new points that bisect the crossovers left.

A budget-limited run measures the coarse grid first (it bounds every region), then the refinement points ordered by
how much they can change a decision: a point whose nearest coarse neighbours (same kind, phase and query length) were
won by different candidates sits on a crossover and is measured first; a point whose neighbours agree is measured
last, if time remains. Then the plan adapts (``bisections``): wherever two measured neighbours along one axis (decode:
batch, context; prefill: chunk, cached prefix) are won by different (backend, tactic) candidates that are not a
near-tie, and lie at least ``BISECT_FACTOR`` apart, the point between them (geometric mean) is measured, and again
until every crossover is located within that factor (a tactic another measured one covers takes no part: selection
drops it there; ``TACTIC_CROSSOVERS``, an experiment, adds the crossovers of a winning backend's own tactics). A point
between neighbours at least ``WIDE_FACTOR`` apart where the overall winners cross measures every candidate, as a
planned point does (one that only a backend's own tactics call for measures that backend's tactics and the two
winners); a point between closer ones (the last rounds) measures only the contenders there: the candidates within
``CONTENDER`` of the best at either neighbour, the two winners among them. Where the crossover lies is a question
between those; a candidate further behind at both ends of so short a segment cannot win between them, and measuring it
would cost the most.

A refinement or bisection point does not measure a candidate that was at least ``PRUNE_FACTOR`` slower than the
best at every one of its measured neighbours, or failed there in the same KV layout (a wrong answer, a crash, an
error or a timeout: ``FAILED``) (``pruned``): it cannot win between them, and each measurement of it
costs time (FLEX_ATTENTION compiles per shape, TORCH_SDPA runs four kernels). Neighbours are taken across KV layouts:
the same workload measured in the other layout (its twin) is the nearest. The first layout's coarse points
measure every candidate, so every candidate keeps a measured range that brackets the whole plan; a coarse point of
another layout leaves out only a candidate that was that far behind at its twin and at its other nearest neighbours.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Callable, Iterable, Sequence

from hwtune.core import catalogue
from hwtune.core.records import FAILED, MeasurementRecord
from hwtune.core.types import AttentionWorkload
from hwtune.tuner.plan import PlanItem

#: A crossover between measured neighbours at least this factor apart is bisected.
BISECT_FACTOR = 2
#: A bisection point between neighbours at least this factor apart measures every candidate; closer, the contenders.
WIDE_FACTOR = 4
#: A candidate within this factor of the best at either neighbour is a contender at a bisection point between them.
CONTENDER = 1.10
#: Winners within this factor of each other at both neighbours are a near-tie: nothing worth locating.
NEAR_TIE = 1.03
#: An experiment, off by default (``benchmarks/regret.py --bisect-tactics``): also bisect where the tactics of a
#: backend that wins somewhere in the plan cross over (``_to_measure``). Measured on one model so far (docs/tuning.md
#: "Plans": Llama-2-7B on an H200, 4 % more tune time, one backend's regret lower, per phase unchanged).
TACTIC_CROSSOVERS = False
#: A candidate this many times slower than the best at every measured neighbour of a point is not measured there.
PRUNE_FACTOR = 3.0
#: Measured neighbours (nearest first, same kind, phase and spec) that decide ``pruned``; at least two are needed.
PRUNE_NEIGHBOURS = 4


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


def _axes(item: PlanItem) -> tuple[tuple, int, int] | None:
    """(group, first axis, second axis) of a decode (batch, context) or prefill (chunk, cached prefix) item."""
    w = item.workload
    if not isinstance(w, AttentionWorkload) or w.phase not in ("decode", "prefill") or w.context_lens:
        return None
    if w.phase == "decode":
        return ("decode", w.spec.key(), w.query_len), w.batch, w.context_len
    return ("prefill", w.spec.key(), w.batch), w.query_len, w.context_len - w.query_len


def _at(p: PlanItem, q: PlanItem, a: int, b: int, contenders: Sequence[str] | None = None) -> PlanItem:
    """The point (a, b) between neighbours ``p`` and ``q``, a level below both, measuring ``contenders`` (entries
    ``name:tactic``, within what either neighbour's own backends allow) when given, else the backends either measures
    (every backend where either does)."""
    w = p.workload
    assert isinstance(w, AttentionWorkload)
    level = max(p.level, q.level) + 1
    backends = tuple(dict.fromkeys(p.backends + q.backends)) if p.backends and q.backends else None
    if contenders is not None:
        backends, flag = _within(tuple(contenders), backends), True
    else:
        flag = p.contenders and q.contenders
    if w.phase == "decode":
        return PlanItem(dataclasses.replace(w, batch=a, context_len=b), level, backends, flag)
    return PlanItem(dataclasses.replace(w, query_len=a, context_len=a + b), level, backends, flag)


def _timings(records: Iterable[MeasurementRecord]) -> dict[str, dict[tuple[str, str], float]]:
    out: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for r in records:
        if r.status == "ok" and r.stats is not None:
            cur = out[r.workload_key].get((r.backend, r.tactic))
            out[r.workload_key][(r.backend, r.tactic)] = min(cur or math.inf, r.stats.median_us)
    return out


def _failed(records: Iterable[MeasurementRecord]) -> dict[str, set[tuple[str, str]]]:
    """The candidates that failed per workload key (a wrong answer is caught by the gate before timing, but costs the
    gate's two batches: TORCH_SDPA cudnn, 37 of them in one tune, about 0.5 s each)."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for r in records:
        if r.status in FAILED:
            out[r.workload_key].add((r.backend, r.tactic))
    return out


def _crossed(p: dict[tuple[str, str], float], q: dict[tuple[str, str], float]) -> bool:
    """Whether different candidates win at two neighbours and the choice between them matters at either."""
    if not p or not q:
        return False
    wp, wq = min(p, key=p.__getitem__), min(q, key=q.__getitem__)
    if wp == wq:
        return False
    return p.get(wq, math.inf) > NEAR_TIE * p[wp] or q.get(wp, math.inf) > NEAR_TIE * q[wq]


def _to_measure(
    p: dict[tuple[str, str], float], q: dict[tuple[str, str], float], routable: set[str], wide: bool
) -> list[str] | None:
    """What the point between two neighbours measures, or ``[]`` if nothing crosses over between them. Where the
    winners of every candidate cross: every candidate if the neighbours are ``WIDE_FACTOR`` or more apart (None),
    else the contenders. With ``TACTIC_CROSSOVERS``, where the tactics of a ``routable`` backend cross (one that wins
    somewhere in the plan, so selection may route a phase to it and dispatch its own tactics: fa3 and fa2-tc crossing
    matters where FlashInfer serves prefill, even if the Triton kernel wins both neighbours): that backend's tactics
    measured at either neighbour if wide, else its contenders, with the two neighbours' winners (without them the
    next round would see a crossover between a neighbour's winner and a point that never timed it)."""
    p, q = _dispatchable(p), _dispatchable(q)
    own: list[str] = []
    for b in sorted(routable) if TACTIC_CROSSOVERS else ():
        bp, bq = ({c: t for c, t in d.items() if c[0] == b} for d in (p, q))
        if len(bp) > 1 and len(bq) > 1 and _crossed(bp, bq):
            own += [f"{c[0]}:{c[1]}" for c in {**bp, **bq}] if wide else _contenders(bp, bq)
    if _crossed(p, q):
        return None if wide else list(dict.fromkeys(_contenders(p, q) + own))
    if not own:
        return []
    won = [f"{c[0]}:{c[1]}" for c in (min(p, key=p.__getitem__), min(q, key=q.__getitem__))]
    return list(dict.fromkeys(won + own))


def _dispatchable(timings: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """One backend's timings at a point without the tactics a measured one covers (``Tactic.covers``): selection drops
    those where both were measured (``selector.measured``), so a crossover with them is noise, not a choice."""
    covered = {(backend, c) for backend, tactic in timings for c in catalogue.covered(backend, tactic)}
    return {c: t for c, t in timings.items() if c not in covered}


def _middle(lo: int, hi: int) -> int | None:
    """The point between two coordinates (geometric; a prefix of 0 counts as 1), if they are far enough apart and it
    is neither of them."""
    if max(lo, 1) * BISECT_FACTOR > hi:
        return None
    mid = round(math.sqrt(max(lo, 1) * hi))
    return mid if lo < mid < hi else None


def _contenders(p: dict[tuple[str, str], float], q: dict[tuple[str, str], float]) -> list[str]:
    """``name:tactic`` of every candidate within ``CONTENDER`` of the best at ``p`` or at ``q`` (best first)."""
    near: dict[tuple[str, str], float] = {}
    for d in (p, q):
        best = min(d.values())
        for c, t in d.items():
            if t <= CONTENDER * best:
                near[c] = min(near.get(c, math.inf), t / best)
    return [f"{b}:{t}" for b, t in sorted(near, key=lambda c: (near[c], c))]


def _within(entries: tuple[str, ...], bound: Sequence[str] | None) -> tuple[str, ...]:
    """The ``entries`` (``name`` or ``name:tactic``) that ``bound`` allows (a bare name allows its every tactic)."""
    if not bound:
        return entries
    allowed = {e for e in bound if ":" in e} | {e.partition(":")[0] for e in bound if ":" not in e}
    return tuple(e for e in entries if e in allowed or e.partition(":")[0] in allowed)


def narrowed(item: PlanItem, bound: Sequence[str] | None) -> tuple[str, ...] | None:
    """The backends to measure at ``item``: its own, else ``bound`` (the run's ``--backends``, else the plan's). A
    plan section's own backends are measured as given; a bisection point's contenders only where ``bound`` allows them:
    the neighbours' timings that chose them may come from another run of the same store. Empty: nothing to measure."""
    if not item.backends:
        return tuple(bound) if bound else None
    return _within(item.backends, bound) if item.contenders else item.backends


def _merge(old: PlanItem | None, new: PlanItem) -> PlanItem:
    """One item for a point that two pairs of neighbours both call for: it measures what either would."""
    if old is None:
        return new
    if old.backends is None or new.backends is None:
        return dataclasses.replace(new, backends=None, contenders=False)
    both = tuple(dict.fromkeys(old.backends + new.backends))
    return dataclasses.replace(new, backends=both, contenders=old.contenders and new.contenders)


def bisections(
    items: Sequence[PlanItem],
    records: Iterable[MeasurementRecord],
    fits: Callable[[PlanItem], bool] = lambda item: True,
) -> list[PlanItem]:
    """New items between measured neighbours that cross over (module docstring), not already among ``items``."""
    timed = _timings(records)
    groups: dict[tuple, dict[tuple[int, int], PlanItem]] = defaultdict(dict)
    for item in items:
        axes = _axes(item)
        if axes is not None and item.key in timed:
            groups[axes[0]][(axes[1], axes[2])] = item
    known = {i.key for i in items}
    new: dict[str, PlanItem] = {}
    # backends selection may route a phase to: the overall winner somewhere in the plan (one backend serves every
    # phase where the engine cannot route them)
    routable = {min(t, key=t.__getitem__)[0] for p in groups.values() for t in (timed[i.key] for i in p.values()) if t}
    for points in groups.values():
        for axis in (0, 1):
            lines: dict[int, list[tuple[int, int]]] = defaultdict(list)
            for coords in points:
                lines[coords[1 - axis]].append(coords)
            for line in lines.values():
                line.sort(key=lambda c: c[axis])
                for p, q in zip(line, line[1:]):
                    mid = _middle(p[axis], q[axis])
                    if mid is None:
                        continue
                    wide = max(p[axis], 1) * WIDE_FACTOR <= q[axis]
                    measure = _to_measure(timed[points[p].key], timed[points[q].key], routable, wide)
                    if measure == []:
                        continue
                    coords = (mid, p[1]) if axis == 0 else (p[0], mid)
                    item = _at(points[p], points[q], *coords, measure)
                    if item.backends == ():  # no contender is one its neighbours measure: nothing to measure here
                        continue
                    if item.key not in known and fits(item):
                        new[item.key] = _merge(new.get(item.key), item)
    return list(new.values())


def pruned(
    item: PlanItem, measured: Sequence[PlanItem], records: Iterable[MeasurementRecord]
) -> frozenset[tuple[str, str]]:
    """The (backend, tactic) candidates not worth measuring at ``item`` (module docstring): ``PRUNE_FACTOR`` or more
    slower than the best, or failed, at each of its nearest neighbours where it was measured (``PRUNE_NEIGHBOURS`` of
    them, at least two, across KV layouts; points that left it out do not count, so it stays left out between them).
    At a coarse point (level 0) only a candidate measured at the point's twin in another layout."""
    records = list(records)
    near = _neighbours(item, measured, _timings(records), _failed(records))
    twin = near[0][1] if near and near[0][0] == 0 else {}
    if item.level == 0 and not twin:
        return frozenset()
    left_out = set()
    for c in set().union(*(t for _, t in near)):
        seen = [t for _, t in near if c in t][:PRUNE_NEIGHBOURS]
        if item.level == 0 and c not in twin:
            continue
        if len(seen) >= 2 and all(t[c] >= PRUNE_FACTOR * min(t.values()) for t in seen):
            left_out.add(c)
    return frozenset(left_out)


def _neighbours(
    item: PlanItem,
    measured: Sequence[PlanItem],
    timed: dict[str, dict[tuple[str, str], float]],
    failed: dict[str, set[tuple[str, str]]],
) -> list[tuple[float, dict[tuple[str, str], float]]]:
    """(squared distance, latency per candidate) of the measured points in ``item``'s group, nearest first; a failed
    candidate's latency is infinite, at points in ``item``'s own KV layout only (a failure can be the layout's: a DCP
    prefill wrapper built for HND crashed on NHD tensors). Only points where some candidate timed ok count."""
    group, x, y = _layout_free(item)
    near = []
    for m in measured:
        g, mx, my = _layout_free(m)
        if m.key != item.key and g == group and timed.get(m.key):
            same_layout = getattr(m.workload, "spec", None) == getattr(item.workload, "spec", None)
            lat = {c: math.inf for c in (failed.get(m.key, ()) if same_layout else ())} | timed[m.key]
            near.append(((mx - x) ** 2 + (my - y) ** 2, lat))
    near.sort(key=lambda d: d[0])
    return near


def _layout_free(item: PlanItem) -> tuple[tuple, float, float]:
    """``_coords`` with the KV layout left out of the group: a workload's twin in the other layout is a neighbour."""
    group, x, y = _coords(item)
    w = item.workload
    if isinstance(w, AttentionWorkload):
        group = (group[0], w.spec.any_layout().key(), *group[2:])
    return group, x, y
