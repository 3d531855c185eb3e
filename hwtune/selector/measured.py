"""Ranking from measurements: cost of each backend over the engine's workload mix.

Only measurements from this environment (same fingerprint hash) count; the others are listed in the notes
with what differs ("measured with flashinfer 0.6.11; installed is 0.6.18"). Across hosts a shape's latency
is the median of the hosts' medians, so one faulty or hostile host cannot flip the choice when two others
agree. A backend that crashed or gave a wrong answer for this spec here is rejected with that evidence.

For each mix point a backend's latency is its best tactic's: measured at that exact shape, or interpolated
from measured neighbours of the same phase by a local log-linear fit in (log batch, log context). Backends
measured for every mix point are ranked by weighted cost, ahead of the rest (static order).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from hwtune.core.environment import differences
from hwtune.core.records import DISQUALIFYING
from hwtune.selector.mix import MixPoint
from hwtune.selector.selection import DispatchEntry, RankedBackend

NEIGHBOURS = 4


@dataclass(frozen=True)
class Point:
    """One measured shape of one (backend, tactic, phase): the median over hosts of each host's median (so one odd
    host cannot flip a choice), and how many hosts measured it."""

    batch: int
    context: int
    query_len: int
    latency_us: float
    hosts: int


@dataclass
class Evidence:
    """This environment's usable measurements of one spec, aggregated."""

    points: dict[tuple[str, str, str], list[Point]] = field(default_factory=dict)  # (backend, tactic, phase)
    disqualified: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def backends(self) -> set[str]:
        """Backends with at least one usable (ok, this-environment) measurement."""
        return {b for b, _, _ in self.points}


def _shape(row: tuple) -> tuple[str, int, int, int] | None:
    """(phase, batch, context, query_len) of a store row; all2all uses tokens per rank as the batch."""
    kind, phase, batch, context, query_len, tokens, normalized = row[:7]
    if kind == "all2all":
        return "dispatch_combine", int(tokens), 1, 1
    ragged = (json.loads(normalized) if isinstance(normalized, str) else normalized or {}).get("context_lens")
    if phase not in ("decode", "prefill") or ragged:
        return None  # mixed batches and ragged lengths are measured, but are not mix points
    return str(phase), int(batch), int(context), int(query_len or 1)


def gather(rows: Iterable[tuple], fingerprints: Mapping[str, Mapping], env_hash: str, fingerprint: Mapping) -> Evidence:
    """Aggregate store rows (``hwtune.db.sqlite_direct`` column order) of one spec for this environment."""
    ev = Evidence()
    per_host: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    foreign: dict[str, int] = defaultdict(int)
    for row in rows:
        backend, tactic, status, median, message, host, created, h = row[7:15]
        if h != env_hash:
            foreign[h] += 1
            continue
        if status in DISQUALIFYING:
            shape = _shape(row)
            where = f"{shape[0]} batch {shape[1]} x {shape[2]}" if shape else "a measured workload"
            first = message.splitlines()[0] if message else status
            ev.disqualified.setdefault(backend, []).append(
                f"{backend} tactic {tactic} {'crashed' if status == 'crashed' else 'gave a wrong answer'}"
                f" on {where} in this environment (host {host}, {str(created)[:10]}): {first}"
            )
            continue
        if status != "ok" or median is None:
            continue
        shape = _shape(row)
        if shape is not None:
            per_host[(backend, tactic, *shape)][host].append(float(median))
    for (backend, tactic, phase, b, c, q), hosts in per_host.items():
        host_medians = [statistics.median(v) for v in hosts.values()]
        ev.points.setdefault((backend, tactic, phase), []).append(
            Point(b, c, q, statistics.median(host_medians), len(host_medians))
        )
    for h, n in foreign.items():
        why = "; ".join(differences(fingerprints.get(h, {}), fingerprint)[:3]) or "a different environment"
        ev.notes.append(f"ignored {n} measurement(s) from another environment: {why}")
    return ev


def _log(x: float) -> float:
    return math.log2(max(x, 1e-9))


def estimate(points: Sequence[Point], mp: MixPoint) -> tuple[float, bool, float] | None:
    """(latency_us, exact, confidence) at ``mp`` from one tactic's points of the same phase."""
    same_q = [p for p in points if p.query_len == mp.query_len] or list(points)
    if not same_q:
        return None
    for p in same_q:
        if p.batch == mp.batch and p.context == mp.context:
            return p.latency_us, True, 1.0
    x, y = _log(mp.batch), _log(mp.context)
    near = sorted(same_q, key=lambda p: (_log(p.batch) - x) ** 2 + (_log(p.context) - y) ** 2)[:NEIGHBOURS]
    d0 = math.sqrt((_log(near[0].batch) - x) ** 2 + (_log(near[0].context) - y) ** 2)
    conf = 1.0 / (1.0 + d0 / 2)
    rows = [(1.0, _log(p.batch), _log(p.context)) for p in near]
    target = [_log(p.latency_us) for p in near]
    coef = _least_squares(rows, target)
    if coef is None:  # too few or collinear neighbours: distance-weighted mean of log latency
        wsum = sum(1 / (1e-6 + (_log(p.batch) - x) ** 2 + (_log(p.context) - y) ** 2) for p in near)
        val = (
            sum(t / (1e-6 + (_log(p.batch) - x) ** 2 + (_log(p.context) - y) ** 2) for p, t in zip(near, target)) / wsum
        )
    else:
        val = coef[0] + coef[1] * x + coef[2] * y
        lo, hi = min(target), max(target)
        spread = max(1.0, hi - lo)
        val = min(max(val, lo - spread), hi + spread)  # no wild extrapolation
    return 2.0**val, False, conf


def _least_squares(rows: list[tuple[float, float, float]], y: list[float]) -> list[float] | None:
    """Solve the 3x3 normal equations; None when degenerate (a column constant or too few points)."""
    if len(rows) < 3:
        return None
    cols = [c for c in range(3) if c == 0 or len({r[c] for r in rows}) > 1]
    a = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
    b = [sum(r[i] * t for r, t in zip(rows, y)) for i in cols]
    n = len(cols)
    for i in range(n):  # Gauss-Jordan with partial pivoting
        piv = max(range(i, n), key=lambda k: abs(a[k][i]))
        if abs(a[piv][i]) < 1e-9:
            return None
        a[i], a[piv], b[i], b[piv] = a[piv], a[i], b[piv], b[i]
        for k in range(n):
            if k != i:
                f = a[k][i] / a[i][i]
                a[k] = [ak - f * ai for ak, ai in zip(a[k], a[i])]
                b[k] -= f * b[i]
    sol = [b[i] / a[i][i] for i in range(n)]
    full = [0.0, 0.0, 0.0]
    for c, v in zip(cols, sol):
        full[c] = v
    return full


@dataclass
class Costed:
    """A backend's estimated cost over the workload mix: weighted latency, whether every point was measured exactly,
    the weight-averaged confidence, and its main tactic and cost per phase."""

    backend: str
    cost_us: float  # weighted latency over the mix
    exact: bool
    confidence: float
    tactics: dict[str, str]  # tactic with the most weight per phase
    phase_cost: dict[str, float]


def cost_backend(ev: Evidence, backend: str, mix: Sequence[MixPoint]) -> Costed | None:
    """Weighted cost over the mix with the best tactic per point; None if some phase is unmeasured."""
    total, conf_w, exact = 0.0, 0.0, True
    weight_by_tactic: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    phase_cost: dict[str, float] = defaultdict(float)
    tactics = {t for (b, t, _p) in ev.points if b == backend}
    for mp in mix:
        best = None
        for t in tactics:
            pts = ev.points.get((backend, t, mp.phase))
            est = estimate(pts, mp) if pts else None
            if est is not None and (best is None or est[0] < best[1][0]):
                best = (t, est)
        if best is None:
            return None
        t, (lat, is_exact, conf) = best
        total += mp.weight * lat
        phase_cost[mp.phase] += mp.weight * lat
        conf_w += mp.weight * conf
        exact &= is_exact
        weight_by_tactic[mp.phase][t] += mp.weight
    wsum = sum(mp.weight for mp in mix) or 1.0
    main = {ph: max(ws, key=ws.get) for ph, ws in weight_by_tactic.items()}  # type: ignore[arg-type]
    return Costed(backend, total, exact, conf_w / wsum, main, dict(phase_cost))


def dispatch_table(ev: Evidence, backend: str, max_batch: int, max_context: int) -> tuple[DispatchEntry, ...]:
    """Best tactic of ``backend`` per cell of a power-of-two grid (batch x context; context for prefill).

    Each cell's tactic minimises the interpolated latency at the cell's geometric centre, so shapes between
    measured points follow the measured crossovers instead of snapping to the next measured point.
    ``hwtune.selector.dispatch.lookup`` finds a cell by bit length in constant time.
    """
    phases = sorted({p for (b, _t, p) in ev.points if b == backend})
    out: list[DispatchEntry] = []
    for phase in phases:
        tactics = {t: pts for (b, t, p), pts in ev.points.items() if b == backend and p == phase}
        batches = [1] if phase == "prefill" else [1 << i for i in range(max(1, max_batch - 1).bit_length() + 1)]
        contexts = (
            [1]
            if phase == "dispatch_combine"
            else [1 << i for i in range(4, max(16, max_context - 1).bit_length() + 1)]
        )
        for bm in batches:
            for cm in contexts:
                b = bm if bm == 1 else max(1, round(bm / math.sqrt(2)))
                c = cm if cm <= 16 else max(1, round(cm / math.sqrt(2)))
                q = min(c, 2048) if phase == "prefill" else 1
                best = None
                for t, pts in tactics.items():
                    est = estimate(pts, MixPoint(phase, b, c, 1.0, q))
                    if est is not None and (best is None or est[0] < best[1]):
                        best = (t, est[0], est[1])
                if best is not None:
                    out.append(
                        DispatchEntry(
                            phase=phase,
                            batch_max=bm,
                            context_max=cm,
                            tactic=best[0],
                            latency_us=round(best[1], 2),
                            source="measured" if best[2] else "interpolated",
                        )
                    )
    return tuple(out)


def rank(
    static: Sequence[RankedBackend], ev: Evidence, mix: Sequence[MixPoint]
) -> tuple[list[RankedBackend], dict[str, str]]:
    """Measured backends by cost (cheapest first), then the rest in static order; and the per-phase winners."""
    costed = {r.backend: c for r in static if (c := cost_backend(ev, r.backend, mix)) is not None}
    measured = sorted(costed.values(), key=lambda c: c.cost_us)
    ranked = [
        RankedBackend(
            backend=c.backend,
            source="measured" if c.exact else "interpolated",
            tactics={**next(r.tactics for r in static if r.backend == c.backend), **c.tactics},
            latency_us=c.cost_us,
            confidence=round(c.confidence, 3),
            detail=f"weighted cost over {len(mix)} workload shapes",
        )
        for c in measured
    ]
    ranked += [r for r in static if r.backend not in costed]
    per_phase: dict[str, str] = {}
    for phase in sorted({mp.phase for mp in mix}):
        cands = [(c.phase_cost.get(phase, math.inf), c.backend) for c in measured if phase in c.phase_cost]
        if cands:
            per_phase[phase] = min(cands)[1]
    return ranked, per_phase
