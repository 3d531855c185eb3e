"""Which measured backend wins over the engine's workload mix, decided on the same points for every backend.

Each backend is costed at every mix point with its best tactic there (``interpolate.estimate``). The decision then
compares the backends on the same points and only on those every compared backend's measurements bracket (measured
there, or with measured shapes below and above: ``interpolate.bracketed``). A point beyond the measured range of one
of them is an extrapolation and must not decide between them; it still counts in the cost shown. Where such shared
points hold less than ``SHARED_FLOOR`` of the mix's weight (backends measured on different grids), every point
decides. What is compared is each backend's typical latency over those points, their geometric mean weighted by the
mix's weights, which are shares of GPU time (``deciding_cost``). Among the backends within ``TIE`` of the cheapest,
the one whose worst point is least behind the best backend there wins, since a near-tie is no reason to accept a large
loss on some workloads. The same holds for each phase's winner (``per_phase``). A backend whose probe measures fewer
phases than it serves (FLASHMLA's decode) is costed and compared on those phases' points alone: it competes for them
per phase, and as one backend follows the backends whose whole cost is known, unless the engine runs its other phases
on a path they all share (``decide_one``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

from hwtune.selector.interpolate import bracketed, estimate
from hwtune.selector.measured import Evidence
from hwtune.selector.mix import MixPoint
from hwtune.selector.selection import RankedBackend

#: Typical latencies (``deciding_cost``) within this factor of the cheapest are a near-tie, broken by the worst point.
TIE = 1.05
#: Shared bracketed points must hold at least this share of the mix's weight to decide alone.
SHARED_FLOOR = 0.25


@dataclass
class Costed:
    """A backend's estimated cost over the workload mix: weighted latency, whether every point was measured exactly,
    the weight-averaged confidence, its main tactic and cost per phase, per mix point (latency, bracketed), and its
    typical latency (``deciding_cost`` over every point it was costed at: what decisions compare). A backend measured
    in fewer phases than it serves (``phases``) is costed over those phases' points only; at the others its latency is
    NaN and it is never compared there."""

    backend: str
    cost_us: float  # weighted latency over the mix (over ``phases``' points where given, scaled to the mix's weight)
    exact: bool
    confidence: float
    tactics: dict[str, str]  # tactic with the most weight per phase
    phase_cost: dict[str, float]
    per_point: tuple[tuple[float, bool], ...] = ()
    phases: frozenset[str] | None = None  # the phases costed, where fewer than the mix's; None: every phase
    typical_us: float = math.nan  # the weighted geometric mean of the latencies over the points costed

    def covers(self, mp: MixPoint) -> bool:
        """Whether the backend was costed at ``mp`` (its phase is one it was measured in)."""
        return self.phases is None or mp.phase in self.phases


#: A tactic's estimate at a mix point: (latency, exact, confidence, inside the measured range), or None.
Estimate = Callable[[str, MixPoint], "tuple[float, bool, float, bool] | None"]


def point_estimate(ev: Evidence, backend: str) -> Estimate:
    """One spec's estimates of ``backend``'s tactics (``interpolate.estimate``; inside: ``interpolate.bracketed``)."""

    def at(tactic: str, mp: MixPoint) -> tuple[float, bool, float, bool] | None:
        pts = ev.points.get((backend, tactic, mp.phase))
        est = estimate(pts, mp) if pts else None
        if est is None or pts is None:
            return None
        return est[0], est[1], est[2], est[1] or bracketed(pts, mp)

    return at


def cost_backend(ev: Evidence, backend: str, mix: Sequence[MixPoint]) -> Costed | None:
    """Weighted cost over the mix with the best tactic per point (over the phases its probe measures, where fewer:
    ``Evidence.measured_phases``); None if a phase it should have been measured in is unmeasured."""
    tactics = sorted({t for (b, t, _p) in ev.points if b == backend})  # sorted: ties break alike in every process
    return cost_with(backend, tactics, point_estimate(ev, backend), mix, ev.measured_phases.get(backend))


def cost_with(
    backend: str, tactics: Sequence[str], at: Estimate, mix: Sequence[MixPoint], phases: frozenset[str] | None = None
) -> Costed | None:
    """``cost_backend`` over any estimates (``at``: one spec's, or several layer kinds' weighted together); with
    ``phases``, over those phases' points only (``Costed``)."""
    total, conf_w, exact = 0.0, 0.0, True
    weight_by_tactic: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    phase_cost: dict[str, float] = defaultdict(float)
    per_point: list[tuple[float, bool]] = []
    measured = [phases is None or mp.phase in phases for mp in mix]
    partial = not all(measured)
    for mp, here in zip(mix, measured):
        if not here:
            per_point.append((math.nan, False))
            continue
        best = None
        for t in tactics:
            est = at(t, mp)
            if est is not None and (best is None or est[0] < best[1][0]):
                best = (t, est)
        if best is None:
            return None
        t, (lat, is_exact, conf, inside) = best
        total += mp.weight * lat
        phase_cost[mp.phase] += mp.weight * lat
        conf_w += mp.weight * conf
        exact &= is_exact
        weight_by_tactic[mp.phase][t] += mp.weight
        per_point.append((lat, inside))
    wsum = sum(mp.weight for mp, here in zip(mix, measured) if here) or 1.0
    if not weight_by_tactic:
        return None
    main = {ph: max(ws, key=ws.get) for ph, ws in weight_by_tactic.items()}  # type: ignore[arg-type]
    if partial:  # scaled to the mix's whole weight: the size of a whole cost, never compared with one
        total *= sum(mp.weight for mp in mix) / wsum
    costed = frozenset(phase_cost) if partial else None
    typical = _typical(mix, [(i, lat) for i, (lat, _) in enumerate(per_point) if measured[i]])
    return Costed(backend, total, exact, conf_w / wsum, main, dict(phase_cost), tuple(per_point), costed, typical)


def decide(costed: Sequence[Costed], mix: Sequence[MixPoint], phase: str | None = None) -> tuple[list[str], str]:
    """The backends best first over ``mix`` (one phase's points with ``phase``), and a note on how it was decided
    (module docstring); empty note when nothing needed saying."""
    in_phase = [i for i, mp in enumerate(mix) if phase is None or mp.phase == phase]
    points = [i for i in in_phase if all(c.covers(mix[i]) for c in costed)]
    if not costed or not points:
        return [c.backend for c in costed], ""
    shared = [i for i in points if all(c.per_point[i][1] for c in costed)]
    weight = sum(mix[i].weight for i in points) or 1.0
    deciding = shared if sum(mix[i].weight for i in shared) >= SHARED_FLOOR * weight else points
    cost = deciding_cost(costed, mix, deciding)
    order = sorted(costed, key=lambda c: cost[c.backend])
    cheapest = cost[order[0].backend]
    best_at = {i: min(c.per_point[i][0] for c in costed) for i in deciding}
    worst = {c.backend: max(c.per_point[i][0] / best_at[i] for i in deciding) for c in costed}
    near = [c for c in order if cost[c.backend] <= cheapest * TIE]
    winner = min(near, key=lambda c: (round(worst[c.backend], 3), cost[c.backend]))
    ranked = [winner.backend] + [c.backend for c in order if c is not winner]
    partial = _partial_note(costed, mix, in_phase, points)
    aside = "" if partial else _extrapolations_aside(costed, mix, points, cost, order[0].backend)
    note = _note(len(costed), len(points), deciding, shared, winner, order[0], worst, phase, aside)
    shares = "" if aside or phase else _shares_note(costed, cost, winner)
    return ranked, "; ".join(filter(None, [partial, note, shares]))


def deciding_cost(costed: Sequence[Costed], mix: Sequence[MixPoint], deciding: list[int]) -> dict[str, float]:
    """What ``decide`` minimises: each backend's typical latency over the deciding points, the geometric mean of its
    latencies weighted by the points' weights, ``exp(sum(w * log(latency)) / sum(w))``. The mix's weights are shares
    of GPU time, so each point counts by its share, whatever its latency: a sum of weight x latency, the rule until
    2026-11-28, let the longest shapes outvote the rest (a 6000-token prefill chunk takes 20-40 times a 96-token
    one's latency). Between two backends the ratio of their typical latencies is the weighted geometric mean of their
    latency ratios, point by point, so no third backend changes their order. Re-scored on 26 regret stores of 12
    models it changed the choice on 4, each to a lower p95 and worst regret
    (benchmarks/experiments/decision_objective.py; docs/tuning.md, the decision)."""
    return {c.backend: _typical(mix, [(i, c.per_point[i][0]) for i in deciding]) for c in costed}


def _typical(mix: Sequence[MixPoint], latencies: Sequence[tuple[int, float]]) -> float:
    """The geometric mean of (mix point index, latency) pairs weighted by the points' weights."""
    return geometric_mean([(mix[i].weight, lat) for i, lat in latencies])


def geometric_mean(weighted: Sequence[tuple[float, float]]) -> float:
    """The weighted geometric mean of (weight, latency) pairs (unweighted where every weight is 0: a weights file may
    leave a phase out); NaN for none."""
    if not weighted:
        return math.nan
    weights = [w for w, _ in weighted] if sum(w for w, _ in weighted) > 0 else [1.0] * len(weighted)
    return math.exp(sum(w * math.log(max(lat, 1e-9)) for w, (_, lat) in zip(weights, weighted)) / sum(weights))


def decide_one(costed: Sequence[Costed], mix: Sequence[MixPoint], shared: bool = False) -> tuple[list[str], str]:
    """One backend for every phase: decided (``decide``) among the backends costed in every phase; those measured in
    fewer phases than they serve follow, cheapest first, as their other phases' cost is unknown (each still competes
    for its own phases in ``per_phase_winners``). ``shared``: the engine runs those other phases on a path it shares
    with the other backends, so every backend is decided on the phases all of them were measured in."""
    full = [c for c in costed if c.phases is None]
    partial = sorted((c for c in costed if c.phases is not None), key=lambda c: c.cost_us)
    order, note = decide(costed if shared else full or partial, mix)
    if shared or not full or not partial:
        return order, note
    said = ", ".join(f"{c.backend} ({' and '.join(sorted(c.phases or ()))})" for c in partial)
    after = f"measured in fewer phases than they serve, so ranked after the others and competing per phase only: {said}"
    return order + [c.backend for c in partial], "; ".join(filter(None, [note, after]))


def _partial_note(costed: Sequence[Costed], mix: Sequence[MixPoint], in_phase: list[int], points: list[int]) -> str:
    """What a comparison left out because some backend measures fewer phases than it serves (empty if nothing)."""
    if len(costed) < 2 or len(points) == len(in_phase):
        return ""
    partial = ", ".join(f"{c.backend} measures {' and '.join(sorted(c.phases))} only" for c in costed if c.phases)
    kept = " and ".join(sorted({mix[i].phase for i in points}))
    return f"compared on the {kept} mix points alone, where every backend was measured ({partial})"


def _extrapolations_aside(
    costed: Sequence[Costed], mix: Sequence[MixPoint], points: list[int], cost: dict[str, float], cheapest: str
) -> str:
    """Where the extrapolated points change which backend is cheapest (the costs shown include them): both typical
    latencies (``deciding_cost``) on the deciding points and on every point, so that the ranking does not read as
    contradicting its own numbers."""
    every = deciding_cost(costed, mix, points)
    cheaper = min(every, key=lambda b: every[b])
    if every[cheaper] >= every[cheapest]:
        return ""
    return (
        f"; there {cheapest}'s typical latency is {cost[cheapest]:.1f} us and {cheaper}'s {cost[cheaper]:.1f}, with "
        f"the extrapolations {every[cheapest]:.1f} and {every[cheaper]:.1f}"
    )


def _shares_note(costed: Sequence[Costed], cost: dict[str, float], winner: Costed) -> str:
    """Where a backend with a lower weighted latency (the cost shown) and a higher typical latency ranks after the
    winner: why (``deciding_cost``). Only between backends costed over every phase: a partial one's cost is scaled."""
    if any(c.phases for c in costed):
        return ""
    lighter = min(costed, key=lambda c: c.cost_us)
    if lighter is winner or lighter.cost_us >= winner.cost_us or cost[lighter.backend] <= cost[winner.backend]:
        return ""
    return (
        f"{winner.backend} ranks ahead of {lighter.backend}, whose weighted latency is lower ({lighter.cost_us:.1f} us "
        f"against {winner.cost_us:.1f}): the mix's weights are shares of GPU time, and {winner.backend}'s typical "
        f"latency over them (the geometric mean, weighted by share) is {cost[winner.backend]:.1f} us, "
        f"{lighter.backend}'s {cost[lighter.backend]:.1f} (weighted latencies let the longest shapes decide)"
    )


def _note(
    n_backends: int,
    n_points: int,
    deciding: list[int],
    shared: list[int],
    winner: Costed,
    cheapest: Costed,
    worst: dict[str, float],
    phase: str | None,
    aside: str = "",
) -> str:
    if n_backends < 2:
        return ""
    where = f"{phase} " if phase else ""
    words = []
    if deciding is shared and len(shared) < n_points:
        words.append(
            f"decided over the {len(shared)} of {n_points} {where}mix points inside every measured backend's range "
            f"(the others are extrapolations{aside})"
        )
    elif deciding is not shared:
        words.append(f"the backends' measured ranges share too little of the {where}mix: every point decides")
    if winner is not cheapest:
        words.append(
            f"{winner.backend} and {cheapest.backend} are within {round((TIE - 1) * 100)} %; {winner.backend} is at "
            f"worst {worst[winner.backend]:.2f}x the best backend at a point, {cheapest.backend} "
            f"{worst[cheapest.backend]:.2f}x"
        )
    return "; ".join(words)


def rank(
    static: Sequence[RankedBackend], ev: Evidence, mix: Sequence[MixPoint], shared: bool = False
) -> tuple[list[RankedBackend], dict[str, str], list[str]]:
    """Measured backends in decision order, then the rest in static order; the per-phase winners; notes (``shared``:
    ``decide_one``'s)."""
    costed = {r.backend: c for r in static if (c := cost_backend(ev, r.backend, mix)) is not None}
    order, note = decide_one(list(costed.values()), mix, shared)
    ranked = [
        RankedBackend(
            backend=c.backend,
            source="measured" if c.exact else "interpolated",
            tactics={**next(r.tactics for r in static if r.backend == c.backend), **c.tactics},
            latency_us=c.cost_us,
            typical_us=c.typical_us,
            confidence=round(c.confidence, 3),
            detail="; ".join([_costed_over(c, mix), *ev.caveats.get(c.backend, [])]),
            measured_phases=tuple(sorted(c.phases or ())),
        )
        for c in (costed[b] for b in order)
    ]
    ranked += [r for r in static if r.backend not in costed]
    per_phase = per_phase_winners(list(costed.values()), mix)
    if shared:  # a phase some backend was not measured in runs on the shared path: it is no one's to win
        per_phase = {ph: b for ph, b in per_phase.items() if all(ph in (c.phases or {ph}) for c in costed.values())}
    return ranked, per_phase, [note] if note else []


def _costed_over(c: Costed, mix: Sequence[MixPoint]) -> str:
    if c.phases is None:
        return f"weighted cost over {len(mix)} workload shapes"
    n = sum(1 for mp in mix if c.covers(mp))
    only = " and ".join(sorted(c.phases))
    return f"weighted cost over the {n} {only} shapes of the mix only (measured there only), scaled to its whole weight"


def per_phase_winners(costed: Sequence[Costed], mix: Sequence[MixPoint]) -> dict[str, str]:
    """Each phase's winner by the decision rules, among the backends costed for it."""
    per_phase: dict[str, str] = {}
    for phase in sorted({mp.phase for mp in mix}):
        cands = [c for c in costed if phase in c.phase_cost]
        if cands:
            per_phase[phase] = decide(cands, mix, phase)[0][0]
    return per_phase
