"""Per-step tactic lookup: the chosen backend's best tactic per (phase, batch, context) cell.

Engines may call ``Selection.tactic_for`` every step. Cells are powers of two (``measured.dispatch_table``),
so the lookup is two ``bit_length`` calls and one dict access, built once per selection and cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hwtune.selector.selection import Selection

_TABLES: dict[int, tuple[dict, dict]] = {}


def _table(selection: "Selection") -> tuple[dict, dict]:
    """({(phase, batch exponent, context exponent): tactic}, {phase: (max b exp, min c exp, max c exp)})."""
    key = id(selection)
    cached = _TABLES.get(key)
    if cached is None or cached[0].get("__owner__") is not selection:
        cells: dict = {"__owner__": selection}
        bounds: dict[str, list[int]] = {}
        for e in selection.dispatch:
            ib, ic = (e.batch_max - 1).bit_length(), (e.context_max - 1).bit_length()
            cells[(e.phase, ib, ic)] = e.tactic
            lo_b, lo_c, hi_c = bounds.get(e.phase, [ib, ic, ic])
            bounds[e.phase] = [max(lo_b, ib), min(lo_c, ic), max(hi_c, ic)]
        cached = (cells, {p: tuple(v) for p, v in bounds.items()})
        _TABLES[key] = cached
    return cached


def lookup(selection: "Selection", phase: str, batch: int, context: int) -> str:
    """The cell's tactic; shapes beyond the grid use its edge cells; no grid: the phase's static tactic."""
    cells, bounds = _table(selection)
    edge = bounds.get(phase)
    if edge is None:
        return selection.tactics.get(phase, selection.tactic)
    max_b, min_c, max_c = edge
    ib = 0 if phase == "prefill" else min(max(batch - 1, 0).bit_length(), max_b)
    ic = min(max(max(context - 1, 0).bit_length(), min_c), max_c)
    return cells.get((phase, ib, ic)) or selection.tactics.get(phase, selection.tactic)
