"""Per-step tactic dispatch: the chosen backend's best tactic per (phase, batch or chunk, context) cell.

``dispatch_table`` builds the cells from the evidence once per Selection; engines may call
``Selection.tactic_for`` every step. Cells split every doubling of batch, chunk and context in ``CELLS_PER_OCTAVE``
(``cell_bounds``), so ``lookup`` is two binary searches over a few dozen bounds and one dict access.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from hwtune.selector.interpolate import estimate, shape_coords
from hwtune.selector.measured import Evidence, Point
from hwtune.selector.mix import MixPoint

if TYPE_CHECKING:
    from hwtune.selector.selection import DispatchEntry


#: Dispatch cells per doubling of each axis. A cell's tactic is the one estimated best at its geometric centre, so a
#: shape near a cell's edge takes a tactic chosen up to half a cell away. Finer cells were re-scored on every committed
#: H100 regret store and not adopted (docs/tuning.md "Dispatch cells"): they moved a few shapes from one side of an
#: interpolated crossover to the other, better on some models and worse on others, at 3-4x the cells to estimate.
CELLS_PER_OCTAVE = 1


def cell_bounds(low: int, high: int) -> list[int]:
    """Upper bounds of the cells covering ``low`` to ``high``: ``low``, then ``round(2 ** (i / CELLS_PER_OCTAVE))``
    above it, up to the first power of two at or above ``high``; ascending, no repeats."""
    top = max(low, 1 << max(high - 1, 0).bit_length())
    out = [low]
    i = 0
    while out[-1] < top:
        b = min(round(2 ** (i / CELLS_PER_OCTAVE)), top)
        if b > out[-1]:
            out.append(b)
        i += 1
    return out


def build_table(entries: Iterable["DispatchEntry"]) -> tuple[dict, dict]:
    """({(phase, row bound, context bound): tactic}, {phase: (row bounds, context bounds)}, both ascending); rows
    are batch sizes (decode), chunk lengths (prefill) or tokens per rank (all2all)."""
    cells: dict = {}
    axes: dict[str, tuple[set, set]] = {}
    for e in entries:
        cells[(e.phase, e.batch_max, e.context_max)] = e.tactic
        rows, contexts = axes.setdefault(e.phase, (set(), set()))
        rows.add(e.batch_max)
        contexts.add(e.context_max)
    return cells, {p: (sorted(r), sorted(c)) for p, (r, c) in axes.items()}


def lookup(
    table: tuple[dict, dict],
    tactics: Mapping[str, str],
    phase: str,
    batch: int,
    context: int,
    query_len: int | None = None,
) -> str:
    """The cell's tactic in ``table`` (``build_table``); shapes beyond the grid use its edge cells; no grid: the
    phase's tactic in ``tactics`` (the backend's ranked or static one). A prefill is looked up by its chunk
    (``query_len``; without it, min(context, 2048)) and its context."""
    cells, axes = table or ({}, {})
    default = tactics.get(phase) or next(iter(tactics.values()), "default")
    bounds = axes.get(phase)
    if bounds is None:
        return default
    rows, contexts = bounds
    row = (query_len or min(context, 2048)) if phase == "prefill" else batch
    i = min(bisect.bisect_left(rows, row), len(rows) - 1)
    c = contexts[min(bisect.bisect_left(contexts, context), len(contexts) - 1)]
    found = cells.get((phase, rows[i], c))
    while found is None and phase == "prefill" and i > 0:  # a chunk above the context: the largest below
        i -= 1
        found = cells.get((phase, rows[i], c))
    return found or default


ROBUST_NEIGHBOURS = 4
#: Largest prefill chunk the dispatch grid covers (new tokens per request per step).
MAX_CHUNK = 32768


def _grid(phase: str, max_batch: int, max_context: int) -> list[tuple[int, int, MixPoint, tuple[MixPoint, ...]]]:
    """The cells of one phase (``cell_bounds`` on each axis) as (row bound, context bound, the shape at the cell's
    geometric centre, the distinct shapes at its corners within the engine's range): decode rows are batch sizes,
    prefill rows chunk lengths (cells with the chunk above the context left out; a corner's chunk at most its
    context), all2all rows tokens per rank."""
    if phase == "prefill":
        top_row = max(16, min(max_context, MAX_CHUNK))
        rows = cell_bounds(16, top_row)
    else:
        top_row = max(1, max_batch)
        rows = cell_bounds(1, top_row)
    top_ctx = 1 if phase == "dispatch_combine" else max(16, max_context)
    contexts = [1] if phase == "dispatch_combine" else cell_bounds(16, top_ctx)
    row_centre, ctx_centre = _centres(rows), _centres(contexts)
    row_low, ctx_low = _lows(rows), _lows(contexts)
    cells = []
    for rm in rows:
        for cm in contexts:
            if phase == "prefill" and rm > cm:
                continue
            ends = [(r, c) for r in (row_low[rm], min(rm, top_row)) for c in (ctx_low[cm], min(cm, top_ctx))]
            corners = dict.fromkeys(_shape(phase, r, c) for r, c in ends)
            cells.append((rm, cm, _shape(phase, row_centre[rm], ctx_centre[cm]), tuple(corners)))
    return cells


def _shape(phase: str, row: int, context: int) -> MixPoint:
    """The mix point of one (row, context) of the grid: a prefill of ``row`` new tokens (at most the context) by one
    request, or a batch of ``row`` decoding requests (one token each), or ``row`` tokens per rank."""
    if phase == "prefill":
        return MixPoint(phase, 1, context, 1.0, min(row, context))
    return MixPoint(phase, row, context, 1.0, 1)


def _centres(bounds: Sequence[int]) -> dict[int, int]:
    """Each cell's geometric centre between the bound below it and its own, rounded into the integers the cell holds
    (above the bound below; the first cell: its bound)."""
    out = {bounds[0]: bounds[0]}
    for lo, b in zip(bounds, bounds[1:]):
        out[b] = min(max(round(math.sqrt(lo * b)), lo + 1), b)
    return out


def _lows(bounds: Sequence[int]) -> dict[int, int]:
    """Each cell's smallest value: one above the bound below it; the first cell's, 1 (``lookup`` sends every shape
    below the first bound there)."""
    return {bounds[0]: 1} | {b: lo + 1 for lo, b in zip(bounds, bounds[1:])}


def _box(tactics: Mapping[str, Sequence[Point]], phase: str) -> tuple[float, float, float, float]:
    """(min x, max x, min y, max y) of every shape measured for the phase, in ``_coords``."""
    coords = [shape_coords(phase, p.batch, p.context, p.query_len) for pts in tactics.values() for p in pts]
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    return min(xs), max(xs), min(ys), max(ys)


#: Tactics within this factor of the best at the nearest measured shape count as tied there.
TIE = 1.05
#: Tactics tied at a cell's centre are compared over its corners too (``cell_minimax``); off: at the centre alone.
CELL_TIE_BREAK = True


def shared_shapes(tactics: Mapping[str, Sequence[Point]], names: Sequence[str]) -> set[tuple[int, int, int]]:
    """The (batch, context, query tokens) shapes every one of ``names`` was measured at."""
    return set.intersection(*({(p.batch, p.context, p.query_len) for p in tactics[t]} for t in names))


def robust_tactic(tactics: Mapping[str, Sequence[Point]], mp: MixPoint) -> str | None:
    """Beyond the measured range: the winner at the nearest measured edge shape (every tactic measured there);
    where tactics tie there (within ``TIE``), the one whose worst ratio to the best is smallest over the measured
    shapes within one doubling, so a 1 % winner at the edge is not extended where a neighbour shows it losing.
    None inside the range."""
    x0, x1, y0, y1 = _box(tactics, mp.phase)
    x, y = shape_coords(mp.phase, mp.batch, mp.context, mp.query_len)
    edge = (min(max(x, x0), x1), min(max(y, y0), y1))
    if edge == (x, y) or len(tactics) < 2:
        return None
    shared = shared_shapes(tactics, list(tactics))
    dist = {k: math.dist(shape_coords(mp.phase, *k), edge) for k in shared}
    if not dist:
        return None
    lat = {t: {(p.batch, p.context, p.query_len): p.latency_us for p in pts} for t, pts in tactics.items()}
    nearest = sorted(dist, key=lambda k: (dist[k], k))
    at_edge = {t: lat[t][nearest[0]] for t in sorted(tactics)}
    tied = [t for t in at_edge if at_edge[t] <= TIE * min(at_edge.values())]
    hood = [k for k in nearest if dist[k] <= dist[nearest[0]] + 1.0][:ROBUST_NEIGHBOURS]
    worst = {t: max(lat[t][k] / min(lat[o][k] for o in tactics) for k in hood) for t in tied}
    return min(worst, key=lambda t: (worst[t], at_edge[t]))


def shared_estimates(
    tactics: Mapping[str, Sequence[Point]], tied: Sequence[str], mp: MixPoint
) -> dict[str, float] | None:
    """Each of ``tied`` tactics' estimate at ``mp`` from only the shapes every one of them was measured at; None where
    those are fewer than two.

    WHY: estimates from different sets of shapes are not comparable. A bisection point measures only the contenders
    at its neighbours, so a tactic measured there carries what that shape costs it (a slow wave of FlashInfer's MLA
    at 45 requests: fa3 676 us at 45 x 32768 against 613 at 64 x 32768) while a tactic not measured there is
    interpolated past it. On an H200 (DeepSeek-V3 TP 8, 64-token pages, 2026-11-28) that put fa2 0.5 % under fa3 at
    the cell of 45 x 11585, though fa3 was faster at every shape both were measured at, and fa2 ran 48 x 12000 at
    2.69x the best."""
    shared = shared_shapes(tactics, tied)
    if len(shared) < 2:
        return None
    on_shared = {t: [p for p in tactics[t] if (p.batch, p.context, p.query_len) in shared] for t in tied}
    ests = {t: e[0] for t in tied if (e := estimate(on_shared[t], mp)) is not None}
    return ests if len(ests) == len(tied) else None


def tied_estimates(tactics: Mapping[str, Sequence[Point]], tied: Sequence[str], mp: MixPoint) -> dict[str, float]:
    """Each of ``tied`` tactics' estimate at ``mp`` for comparing them: from the shapes all of them were measured at
    (``shared_estimates``) where there are two, else from each one's own."""
    shared = shared_estimates(tactics, tied, mp)
    if shared is not None:
        return shared
    return {t: e[0] for t in tied if (e := estimate(tactics[t], mp)) is not None}


def cell_minimax(
    tied: Sequence[str], shapes: Sequence[MixPoint], estimates: Callable[[MixPoint], Mapping[str, float]]
) -> str:
    """Of ``tied`` tactics (within ``TIE`` of each other at a cell's centre, ``shapes[0]``), the one whose worst
    estimated ratio to the cheapest of them over ``shapes`` (the centre and the cell's corners) is smallest; equal
    worsts: the cheaper at the centre. ``estimates(shape)``: each tied tactic's estimate there (``tied_estimates``).

    WHY: a cell's tactic serves every shape in it, and two tactics tied at the centre can part a long way inside the
    cell. On an H200 (DeepSeek-V3 TP 8, 64-token pages, 2026-11-28 and -29) FlashInfer's mha-fa2 and mha-fa3 came
    within 1 % at the centre of the prefill cell of 257-512-token chunks in 4097-8192 tokens of context while their
    estimated ratio ran from 0.75 to 1.46 over its corners; the cheaper at the centre, fa2, ran 384 tokens on 6000
    cached at 1.12x fa3. Re-scored on 30 committed stores of 12 models (docs/tuning.md "Tied tactics over
    the cell")."""
    at = [estimates(shape) for shape in shapes]
    worst = dict.fromkeys(tied, 1.0)
    for ests in at:
        floor = min(ests.values(), default=0.0)
        if len(ests) == len(tied) and floor > 0:  # a tactic without an estimate, or a 0 us one, compares nothing
            worst = {t: max(worst[t], ests[t] / floor) for t in tied}
    return min(tied, key=lambda t: (worst[t], at[0].get(t, math.inf), t))


def _best_tactic(
    tactics: Mapping[str, Sequence[Point]], mp: MixPoint, corners: Sequence[MixPoint] = ()
) -> tuple[str, float, bool] | None:
    """(tactic, latency, exact) for one cell: the cheapest estimate inside the measured range, tactics within ``TIE``
    of it compared over the cell (``cell_minimax`` on ``tied_estimates`` at the centre and ``corners``) unless one of
    them was measured at the cell's centre; the robust tactic beyond it."""
    ests = {t: e for t, pts in sorted(tactics.items()) if (e := estimate(pts, mp)) is not None}
    if not ests:
        return None
    best = min(ests, key=lambda t: ests[t][0])
    tied = [t for t in ests if ests[t][0] <= TIE * ests[best][0]]
    if len(tied) > 1 and not any(ests[t][1] for t in tied):  # a measurement at the cell's centre stands
        best = cell_minimax(tied, (mp, *corners), lambda shape: tied_estimates(tactics, tied, shape))
    robust = robust_tactic(tactics, mp)
    if robust is not None and robust in ests:
        best = robust
    return best, ests[best][0], ests[best][1]


def phase_dispatch(
    ev: Evidence, chosen: str, per_phase: Mapping[str, str], max_batch: int, max_context: int
) -> tuple[DispatchEntry, ...]:
    """For each phase ``per_phase`` routes to another backend than ``chosen``: that backend's cells of that phase."""
    out: list[DispatchEntry] = []
    for phase, backend in sorted(per_phase.items()):
        if backend != chosen:
            out += dispatch_table(ev, backend, max_batch, max_context, (phase,))
    return tuple(out)


def dispatch_table(
    ev: Evidence, backend: str, max_batch: int, max_context: int, phases: Sequence[str] | None = None
) -> tuple[DispatchEntry, ...]:
    """Best tactic of ``backend`` per cell of the dispatch grid: decode by batch x context, prefill by chunk x
    context, all2all by tokens per rank (``_grid``).

    Inside the measured range each cell's tactic minimises the estimated latency at the cell's geometric
    centre, so shapes between measured points follow the measured crossovers; beyond it, the tactic robust
    across the nearest measured shapes (``robust_tactic``). ``hwtune.selector.dispatch.lookup`` finds a cell by two
    binary searches. ``phases``: only these (default every measured phase).
    """
    by_phase: dict[str, dict[str, Sequence[Point]]] = {}
    for (b, t, p), pts in ev.points.items():
        if b == backend and (phases is None or p in phases):
            by_phase.setdefault(p, {})[t] = pts
    return table_with(
        sorted(by_phase), lambda mp, corners=(): _best_tactic(by_phase[mp.phase], mp, corners), max_batch, max_context
    )


def table_with(
    phases: Sequence[str],
    choose: Callable[[MixPoint, Sequence[MixPoint]], tuple[str, float, bool] | None],
    max_batch: int,
    max_context: int,
) -> tuple[DispatchEntry, ...]:
    """The grid of ``dispatch_table`` with any per-cell choice (``choose(centre, corners)``: (tactic, latency, exact)
    for the cell; one spec's, or several layer kinds' weighted together)."""
    from hwtune.selector.selection import DispatchEntry

    out: list[DispatchEntry] = []
    for phase in phases:
        for rm, cm, mp, corners in _grid(phase, max_batch, max_context):
            best = choose(mp, corners if CELL_TIE_BREAK else ())
            if best is not None:
                tactic, latency, exact = best
                source = "measured" if exact else "interpolated"
                out.append(DispatchEntry(phase, rm, cm, tactic, round(latency, 2), source))
    return tuple(out)
