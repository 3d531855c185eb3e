"""Models whose layers attend differently: sliding-window layers between full-attention ones (gpt-oss, whose config's
``layer_types`` alternates them; Gemma-2 and Gemma-3 by their code). The engine runs one attention backend for every
layer, so the backend is ranked by its cost over all of them: each kind of layer is selected alone (its own spec: the
model's windowed spec, and the same without the window), and a backend's cost is the layer-count-weighted sum of its
costs over the workload mix. A kind nothing was measured for (a store tuned before both kinds were) is left out of
the costs, and the selection says so. A backend must be valid for every kind; one rejected for a kind is rejected
with that kind's reasons. ``hwtune tune`` measures both kinds for such a model (``tuner.plan.plan_from_model``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from hwtune.core.errors import InvalidSpecError, NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.selection import RankedBackend, Selection

WINDOWED, FULL = "windowed", "full-attention"


def check_layers(spec: AttentionSpec, full_attention_layers: int | None, num_layers: int | None) -> None:
    """Raise InvalidSpecError (exit 2) unless the layer counts describe a model that mixes the two kinds."""
    if full_attention_layers is None and num_layers is None:
        return
    if full_attention_layers is None or num_layers is None:
        raise InvalidSpecError("give full_attention_layers and num_layers together (or neither)")
    if not 0 < full_attention_layers < num_layers:
        raise InvalidSpecError(
            f"full_attention_layers must be between 1 and num_layers - 1 ({num_layers - 1}); got "
            f"{full_attention_layers} (a model whose layers all attend alike is selected by its spec alone)"
        )
    if not spec.sliding_window:
        raise InvalidSpecError(
            "full_attention_layers describes a model whose other layers use a sliding window: give the spec's "
            "sliding_window (the windowed layers' spec)"
        )


def layer_specs(
    spec: AttentionSpec, full_attention_layers: int, num_layers: int
) -> list[tuple[AttentionSpec, int, str]]:
    """(spec, layers, name) of each kind: the windowed layers (``spec``) and the full-attention ones."""
    return [
        (spec, num_layers - full_attention_layers, WINDOWED),
        (replace(spec, sliding_window=None), full_attention_layers, FULL),
    ]


def _entry(sel: Selection, backend: str) -> RankedBackend | None:
    return next((r for r in sel.ranked if r.backend == backend), None)


def _measured(sel: Selection) -> bool:
    return any(r.source != "static" for r in sel.ranked)


def _combined(backend: str, parts: Sequence[tuple[Selection, int, str]]) -> RankedBackend:
    """One backend's rank entry over every kind: cost weighted by layers where every measured kind measured it;
    tactics of the kind with the most layers."""
    costed = [p for p in parts if _measured(p[0])] or list(parts)  # a kind nothing was measured for: left out
    entries = [(e, n, name) for sel, n, name in costed if (e := _entry(sel, backend)) is not None]
    total = sum(n for _, n, _ in entries)
    main = max(entries, key=lambda t: t[1])[0]
    costs = [e.latency_us for e, _, _ in entries]
    if any(e.source == "static" or c is None for (e, _, _), c in zip(entries, costs)):
        return replace(main, source="static", latency_us=None, confidence=None)
    cost = sum(n * c for (_, n, _), c in zip(entries, costs)) / total  # type: ignore[operator]
    source = "measured" if all(e.source == "measured" for e, _, _ in entries) else "interpolated"
    confidence = min((e.confidence for e, _, _ in entries if e.confidence is not None), default=None)
    per_kind = ", ".join(f"{name} {n} x ~{c:.1f} us" for (_, n, name), c in zip(entries, costs))
    return replace(main, source=source, latency_us=cost, confidence=confidence, detail=f"per layer ({per_kind})")


def combine(parts: Sequence[tuple[Selection, int, str]]) -> Selection:
    """One selection for a model of several layer kinds (``parts``: each kind's selection, its layer count and name;
    the first is the model's own spec), ranked by cost over every layer (module docstring)."""
    first = parts[0][0]
    valid = [r.backend for r in first.ranked if all(_entry(sel, r.backend) for sel, _, _ in parts[1:])]
    rejected = dict(first.rejected)
    for sel, _, name in parts[1:]:
        for backend, reasons in sel.rejected.items():
            rejected.setdefault(backend, tuple(f"{name} layers: {r}" for r in reasons))
    if not valid:
        raise NoValidBackendError(
            "no backend serves every kind of layer of this model: "
            + "; ".join(f"{name} layers: {', '.join(r.backend for r in sel.ranked)}" for sel, _, name in parts),
            {b: list(reasons) for b, reasons in rejected.items()},
        )
    entries = [_combined(b, parts) for b in valid]
    measured = sorted((e for e in entries if e.latency_us is not None), key=lambda e: e.latency_us or 0.0)
    ranked = measured + [e for e in entries if e.latency_us is None]  # unmeasured: in the first kind's order
    if first.requested:
        chosen = next(e for e in ranked if e.backend == first.requested)  # each kind's selection checked it
    else:
        chosen = ranked[0]
    agree = {ph: b for ph, b in first.per_phase.items() if all(sel.per_phase.get(ph) == b for sel, _, _ in parts)}
    most, _, most_name = max(parts, key=lambda p: p[1])
    layers = ", ".join(f"{n} {name}" for _, n, name in parts)
    unmeasured = [name for sel, _, name in parts if not _measured(sel)]
    how = "its cost weighted by layer count" if len(unmeasured) < len(parts) else "nothing measured for any kind"
    notes = [f"ranked over every layer ({layers}): one backend serves them all, {how}"]
    if unmeasured and len(unmeasured) < len(parts):
        notes.append(
            f"nothing measured for the {' and '.join(unmeasured)} layers here: ranked by the other layers' costs "
            "only (`hwtune tune --model` measures every kind)"
        )
    if agree != dict(first.per_phase):
        notes.append("the layer kinds' per-phase winners differ: no per-phase routing")
    dispatch = most.dispatch if most.backend == chosen.backend else ()
    if dispatch:
        notes.append(f"tactic_for answers from the {most_name} layers' measurements")
    common = [n for n in first.notes if all(n in sel.notes for sel, _, _ in parts)]
    notes += common + [f"{name} layers: {n}" for sel, _, name in parts for n in sel.notes if n not in common]
    return replace(
        first,
        backend=chosen.backend,
        tactics=dict(chosen.tactics),
        ranked=tuple(ranked),
        rejected=rejected,
        notes=tuple(notes),
        per_phase=agree,
        dispatch=dispatch,
    )
