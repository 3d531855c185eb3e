"""The KV-cache layout of an attention selection: a requested layout is kept, ``auto`` is decided by measurement.

A layout the engine is told to use (``--kv-layout NHD`` or ``HND``) is part of the spec: selection ranks only
backends that serve it, and never replaces it. With ``auto`` the engine may run either, so ``hwtune tune``
measures every layout the backends support (``tuner.plan_model.planned_layouts``) and selection compares them: the
layout whose measured choice is cheapest over the engine's workload mix wins, and the selection's spec names it
(``Selection.kv_layout``; shown in ``--explain`` and the JSON). Without measurements of any explicit layout,
the ``auto`` spec is selected as before, from static priorities and any records stored under ``auto``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from hwtune.core.errors import BackendNotValidError, NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.selection import RankedBackend, Selection

LAYOUTS = ("NHD", "HND")


def _chosen(selection: Selection) -> RankedBackend | None:
    return next((r for r in selection.ranked if r.backend == selection.backend), None)


def measured_cost(selection: Selection) -> float | None:
    """The chosen backend's measured cost over the mix, its typical latency (``RankedBackend.typical_us``, what the
    decision between backends compares; its weighted latency where it has none), or None when it was not measured (the
    phases it covers, where fewer than the mix's: ``RankedBackend.measured_phases``)."""
    chosen = _chosen(selection)
    if chosen is None or chosen.source == "static" or chosen.latency_us is None:
        return None
    return chosen.compared_us


def measured_cheapest(
    select_one: Callable[[AttentionSpec], Selection], choices: dict[str, AttentionSpec]
) -> tuple[str, Selection, str] | None:
    """The measured cheapest of ``choices`` (label -> spec, each selected alone) over the mix: (its label, its
    selection, "label: backend ~cost us; ..." of every measured choice), or None when none was measured. A choice
    nothing serves (or not the requested backend) is left out: another may; so is one whose cost leaves out a layer
    kind nothing was measured for, where another choice's cost covers every kind, and one whose chosen backend was
    measured in fewer phases than the mix has (a decode-only FLASHMLA), where another's covers every phase: costs of
    different coverage are not compared."""
    measured: list[tuple[float, str, Selection]] = []
    phases: dict[str, tuple[str, ...]] = {}  # label -> the chosen backend's measured_phases (empty: every phase)
    for label, spec in choices.items():
        try:
            sel = select_one(spec)
        except (NoValidBackendError, BackendNotValidError):
            continue
        cost, chosen = measured_cost(sel), _chosen(sel)
        if cost is not None and chosen is not None:
            measured.append((cost, label, sel))
            phases[label] = chosen.measured_phases
    if not measured:
        return None
    complete = [m for m in measured if not m[2].unmeasured_layers]  # costs over every layer kind (layer_kinds.py)
    measured = complete or measured
    widest = min((phases[m[1]] for m in measured), key=lambda p: (bool(p), p))  # every phase (()) first
    measured = sorted((m for m in measured if phases[m[1]] == widest), key=lambda m: m[0])
    only = f" ({' and '.join(widest)} only)" if widest else ""
    compared = "; ".join(f"{label}: {sel.backend} ~{cost:.1f} us{only}" for cost, label, sel in measured)
    return measured[0][1], measured[0][2], compared


def over_layouts(select_one: Callable[[AttentionSpec], Selection], spec: AttentionSpec) -> Selection:
    """Select for an ``auto``-layout spec: each explicit layout's selection, the measured cheapest wins; the
    ``auto`` selection stands when no explicit layout was measured. Notes say what was compared."""
    found = measured_cheapest(select_one, {lay: replace(spec, kv_layout=lay) for lay in LAYOUTS})
    if found is None:
        return select_one(spec)
    layout, best, compared = found
    note = f"KV layout {layout} chosen for kv_layout=auto by measured typical latency over the mix ({compared})"
    return replace(best, notes=(note, *best.notes))
