"""The KV-cache layout of an attention selection: a requested layout is kept, ``auto`` is decided by measurement.

A layout the engine is told to use (``--kv-layout NHD`` or ``HND``) is part of the spec: selection ranks only
backends that serve it, and never replaces it. With ``auto`` the engine may run either, so ``hwtune tune``
measures every layout the backends support (``tuner.plan.planned_layouts``) and selection compares them: the
layout whose measured choice is cheapest over the engine's workload mix wins, and the selection's spec names it
(``Selection.kv_layout``; shown in ``--explain`` and the JSON). Without measurements of any explicit layout,
the ``auto`` spec is selected as before, from static priorities and any records stored under ``auto``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from hwtune.core.errors import BackendNotValidError, NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.selection import Selection

LAYOUTS = ("NHD", "HND")


def measured_cost(selection: Selection) -> float | None:
    """The chosen backend's measured cost over the mix, or None when it was not measured."""
    chosen = next((r for r in selection.ranked if r.backend == selection.backend), None)
    if chosen is None or chosen.source == "static" or chosen.latency_us is None:
        return None
    return chosen.latency_us


def over_layouts(select_one: Callable[[AttentionSpec], Selection], spec: AttentionSpec) -> Selection:
    """Select for an ``auto``-layout spec: each explicit layout's selection, the measured cheapest wins; the
    ``auto`` selection stands when no explicit layout was measured. Notes say what was compared."""
    base = select_one(spec)
    measured: list[tuple[float, str, Selection]] = []
    for layout in LAYOUTS:
        try:
            sel = select_one(replace(spec, kv_layout=layout))
        except (NoValidBackendError, BackendNotValidError):
            continue  # no backend (or not the requested one) serves this layout: the other may
        cost = measured_cost(sel)
        if cost is not None:
            measured.append((cost, layout, sel))
    if not measured:
        return base
    measured.sort(key=lambda m: m[0])
    cost, layout, best = measured[0]
    compared = "; ".join(f"{lay}: {s.backend} ~{c:.1f} us" for c, lay, s in measured)
    note = f"KV layout {layout} chosen for kv_layout=auto by measured cost over the mix ({compared})"
    return replace(best, notes=(note, *best.notes))
