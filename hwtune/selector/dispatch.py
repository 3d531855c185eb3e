"""Per-step tactic lookup: the chosen backend's best tactic per (phase, batch bucket, context bucket).

Engines may call ``Selection.tactic_for`` every step, so the lookup is a short scan over a few sorted
buckets (entries are sorted by phase, then batch_max, then context_max when the selection is built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hwtune.selector.selection import Selection


def lookup(selection: "Selection", phase: str, batch: int, context: int) -> str:
    """The bucket's tactic: the first bucket of ``phase`` whose bounds hold batch and context.

    Shapes past the largest bucket use the largest bucket's tactic; no buckets: the phase's static tactic.
    """
    last = None
    for entry in selection.dispatch:
        if entry.phase != phase:
            continue
        last = entry
        if batch <= entry.batch_max and context <= entry.context_max:
            return entry.tactic
    if last is not None:
        best = None
        for entry in selection.dispatch:
            if entry.phase == phase and batch <= entry.batch_max:
                best = entry
        return (best or last).tactic
    return selection.tactics.get(phase, selection.tactic)
