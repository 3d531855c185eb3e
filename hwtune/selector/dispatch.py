"""Per-step tactic lookup: the chosen backend's best tactic per (phase, batch or chunk, context) cell.

Engines may call ``Selection.tactic_for`` every step. Cells are powers of two (``measured.dispatch_table``),
so the lookup is two ``bit_length`` calls and one dict access into a table each Selection builds once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from hwtune.selector.selection import DispatchEntry, Selection


def build_table(entries: Iterable["DispatchEntry"]) -> tuple[dict, dict]:
    """({(phase, row exponent, context exponent): tactic}, {phase: (min row exp, max row exp, min c exp, max c
    exp)}); rows are batch sizes (decode), chunk lengths (prefill) or tokens per rank (all2all)."""
    cells: dict = {}
    bounds: dict[str, list[int]] = {}
    for e in entries:
        ib, ic = (e.batch_max - 1).bit_length(), (e.context_max - 1).bit_length()
        cells[(e.phase, ib, ic)] = e.tactic
        lo_b, hi_b, lo_c, hi_c = bounds.get(e.phase, [ib, ib, ic, ic])
        bounds[e.phase] = [min(lo_b, ib), max(hi_b, ib), min(lo_c, ic), max(hi_c, ic)]
    return cells, {p: tuple(v) for p, v in bounds.items()}


def lookup(selection: "Selection", phase: str, batch: int, context: int, query_len: int | None = None) -> str:
    """The cell's tactic; shapes beyond the grid use its edge cells; no grid: the phase's static tactic. A prefill
    is looked up by its chunk (``query_len``; without it, min(context, 2048)) and its context."""
    cells, bounds = selection._table
    edge = bounds.get(phase)
    if edge is None:
        return selection.tactics.get(phase, selection.tactic)
    min_b, max_b, min_c, max_c = edge
    row = (query_len or min(context, 2048)) if phase == "prefill" else batch
    ib = min(max(max(row - 1, 0).bit_length(), min_b), max_b)
    ic = min(max(max(context - 1, 0).bit_length(), min_c), max_c)
    found = cells.get((phase, ib, ic))
    while found is None and phase == "prefill" and ib > min_b:  # a chunk above the context: the largest below
        ib -= 1
        found = cells.get((phase, ib, ic))
    return found or selection.tactics.get(phase, selection.tactic)
