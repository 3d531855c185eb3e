"""A backend tactic's latency at a shape it was not measured at, from the shapes it was (``estimate``).

For each mix point a backend's latency is its best tactic's: measured at that exact shape, or interpolated from
measured neighbours of the same phase by a local log-linear fit in (log batch, log context) for decode and (log new
tokens, log context per new token) for prefill, bounded by what the shape dominates and is dominated by (latency
never falls as a shape grows) wherever the measurements around it agree with that; where they do not (a larger shape
measured faster than a smaller one on either side of it), by its nearest measurements only.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

from hwtune.selector.measured import Point
from hwtune.selector.mix import MixPoint

#: Measured shapes the local fit reads.
NEIGHBOURS = 4


def _log(x: float) -> float:
    return math.log2(max(x, 1e-9))


@functools.lru_cache(maxsize=1 << 16)  # a dispatch table asks for the same measured shapes' coordinates per cell
def shape_coords(phase: str, batch: int, context: int, query_len: int) -> tuple[float, float]:
    """Where a shape lies for interpolation (log2): decode by (batch, context); prefill by (new tokens, context
    per new token), since which kernel wins follows the chunk and how much cached prefix it attends to (a short
    chunk on a long prefix is another regime from a chunk on an empty cache). Latency grows along both axes."""
    if phase == "prefill":
        return _log(batch * query_len), _log(context / max(1, query_len))
    return _log(batch), _log(context)


def _order(phase: str, batch: int, context: int, query_len: int) -> tuple[int, int]:
    """The axes along which latency never falls: (batch, context) in decode, (new tokens, context) in prefill
    (at a fixed context a longer chunk attends more query rows to nearly as many keys)."""
    return (batch * query_len if phase == "prefill" else batch), context


def _fit(near: list[tuple[tuple[float, float], float]], x: float, y: float) -> float:
    """log2 latency at (x, y) from the nearest points: a local log-linear fit, within the neighbours' spread;
    inverse-distance weighting where the points are too few or collinear."""
    target = [_log(lat) for _c, lat in near]
    coef = _least_squares([(1.0, cx, cy) for (cx, cy), _lat in near], target)
    if coef is None:
        weights = [1 / (1e-6 + (cx - x) ** 2 + (cy - y) ** 2) for (cx, cy), _lat in near]
        return sum(w * t for w, t in zip(weights, target)) / sum(weights)
    lo, hi = min(target), max(target)
    spread = max(1.0, hi - lo)
    return min(max(coef[0] + coef[1] * x + coef[2] * y, lo - spread), hi + spread)


def estimate(points: Sequence[Point], mp: MixPoint) -> tuple[float, bool, float] | None:
    """(latency_us, exact, confidence) at ``mp`` from one tactic's points of the same phase.

    The fit uses the nearest shapes in ``_coords`` (for a prefill: chunk and context per new token, so a short
    chunk on a long prefix is interpolated from such shapes). Latency never falls as a shape grows
    (``_order``), so an estimate lies between the slowest measured point the shape dominates and the fastest
    measured point that dominates it. Below the measured range it is the fastest dominating point (never an
    optimistic guess under anything measured); beyond it, the fit, no lower than what the shape dominates.
    Confidence halves outside the measured box. Where the measurements around the shape contradict that order (one it
    dominates is slower than one that dominates it), the fit within its nearest measurements, at half confidence."""
    pool = _pool(points, mp)
    if not pool:
        return None
    for p in pool:
        if (p.batch, p.context, p.query_len) == (mp.batch, mp.context, mp.query_len):
            return p.latency_us, True, 1.0
    x, y = shape_coords(mp.phase, mp.batch, mp.context, mp.query_len)
    pts = [(shape_coords(mp.phase, p.batch, p.context, p.query_len), p.latency_us) for p in pool]
    near = _spanning(pts, x, y)
    val = 2.0 ** _fit(near, x, y)
    rx, ry = _order(mp.phase, mp.batch, mp.context, mp.query_len)
    order = [(_order(mp.phase, p.batch, p.context, p.query_len), p.latency_us) for p in pool]
    below = [lat for (ox, oy), lat in order if ox <= rx and oy <= ry]
    above = [lat for (ox, oy), lat in order if ox >= rx and oy >= ry]
    d0 = math.dist(near[0][0], (x, y))
    conf = 1.0 / (1.0 + d0 / 2) * (1.0 if below and above else 0.5)
    if below and above and max(below) > min(above):
        # The measurements themselves fall as the shape grows here (a kernel's split heuristic: FlashInfer's xqa
        # took 23 us for one request at 32768 tokens and 12 us for 16): no monotone bound holds, so the estimate is
        # the local fit, kept within its neighbours' measured latencies.
        lats = [lat for _c, lat in near[:NEIGHBOURS]]  # the nearest, not a far point ``_spanning`` added
        return min(max(val, min(lats)), max(lats)), False, conf / 2
    if below:
        val = max(val, max(below))
    if above:
        val = min(val, min(above)) if below else min(above)
    return val, False, conf


def _spanning(
    pts: list[tuple[tuple[float, float], float]], x: float, y: float
) -> list[tuple[tuple[float, float], float]]:
    """The ``NEIGHBOURS`` nearest points, plus the nearest point off their line where they all share one coordinate
    that (x, y) does not: a fit over points of one context cannot tell how latency grows with context (it would
    give the line's latency at any context). Uneven sampling makes such sets: a bisection point that measured only
    the contenders sits beside the others at one context (Gemma-3-4B, H100, 2026-11-27: fa2-tc's four nearest
    measurements to 32 x 20000 all lay at 32768 tokens, one of them a point where fa2, fa2-tc and the Triton kernel
    were the contenders, which put fa2-tc's estimate there 38 % above xqa's)."""
    ranked = sorted(pts, key=lambda pt: (pt[0][0] - x) ** 2 + (pt[0][1] - y) ** 2)
    near = ranked[:NEIGHBOURS]
    for axis, target in ((0, x), (1, y)):
        shared = {c[axis] for c, _lat in near}
        if len(shared) == 1 and abs(next(iter(shared)) - target) > 1e-9:
            off = next((pt for pt in ranked[NEIGHBOURS:] if pt[0][axis] not in shared), None)
            if off is not None:
                near.append(off)
    return near


def _pool(points: Sequence[Point], mp: MixPoint) -> list[Point]:
    """The points an estimate at ``mp`` reads: decode's at the engine's query tokens per request where measured."""
    if mp.phase != "prefill":
        return [p for p in points if p.query_len == mp.query_len] or list(points)
    return list(points)


def bracketed(points: Sequence[Point], mp: MixPoint) -> bool:
    """Whether ``mp`` lies within the measured range: measured itself, or with measured shapes both below and above
    it along ``_order`` (its estimate then lies between measurements, never an extrapolation)."""
    rx, ry = _order(mp.phase, mp.batch, mp.context, mp.query_len)
    order = [_order(mp.phase, p.batch, p.context, p.query_len) for p in _pool(points, mp)]
    return any(ox <= rx and oy <= ry for ox, oy in order) and any(ox >= rx and oy >= ry for ox, oy in order)


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
