"""Per-step tactic lookup: the chosen backend's best tactic per (phase, batch, context) cell.

Engines may call ``Selection.tactic_for`` every step. Cells are powers of two (``measured.dispatch_table``),
so the lookup is two ``bit_length`` calls and one dict access into a table each Selection builds once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from hwtune.selector.selection import DispatchEntry, Selection


def build_table(entries: Iterable["DispatchEntry"]) -> tuple[dict, dict]:
    """({(phase, batch exponent, context exponent): tactic}, {phase: (max b exp, min c exp, max c exp)})."""
    cells: dict = {}
    bounds: dict[str, list[int]] = {}
    for e in entries:
        ib, ic = (e.batch_max - 1).bit_length(), (e.context_max - 1).bit_length()
        cells[(e.phase, ib, ic)] = e.tactic
        lo_b, lo_c, hi_c = bounds.get(e.phase, [ib, ic, ic])
        bounds[e.phase] = [max(lo_b, ib), min(lo_c, ic), max(hi_c, ic)]
    return cells, {p: tuple(v) for p, v in bounds.items()}


def lookup(selection: "Selection", phase: str, batch: int, context: int) -> str:
    """The cell's tactic; shapes beyond the grid use its edge cells; no grid: the phase's static tactic."""
    cells, bounds = selection._table
    edge = bounds.get(phase)
    if edge is None:
        return selection.tactics.get(phase, selection.tactic)
    max_b, min_c, max_c = edge
    ib = 0 if phase == "prefill" else min(max(batch - 1, 0).bit_length(), max_b)
    ic = min(max(max(context - 1, 0).bit_length(), min_c), max_c)
    return cells.get((phase, ib, ic)) or selection.tactics.get(phase, selection.tactic)
