"""Models whose layers attend differently: sliding-window layers between full-attention ones (gpt-oss, whose config's
``layer_types`` alternates them; Gemma-2 and Gemma-3 by their code). The engine runs one attention backend for every
layer, so the backend is ranked by its cost over all of them: each kind of layer is selected alone (its own spec: the
model's windowed spec, and the same without the window), and a backend's cost is the layer-count-weighted mean of its
costs over the workload mix. The engine also runs one tactic per step for every layer, so the chosen backend's
tactics and dispatch table come from the kinds' measurements merged into one layer-weighted latency per shape
(``weighted_evidence``): a tactic that wins on the windowed layers (which read at most the window) but is several
times slower on the full-attention ones at long contexts is not dispatched there. A kind nothing was measured for (a
store tuned before both kinds were) is left out of the costs, and the selection says so. A backend must be valid for
every kind; one rejected for a kind is rejected with that kind's reasons. ``hwtune tune`` measures both kinds for
such a model (``tuner.plan_model.plan_from_model``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from hwtune.core.errors import InvalidSpecError, NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector import dispatch
from hwtune.selector.decision import (
    TIE,
    Costed,
    Estimate,
    cost_with,
    decide_one,
    geometric_mean,
    per_phase_winners,
    point_estimate,
)
from hwtune.selector.dispatch import dispatch_table, robust_tactic, table_with
from hwtune.selector.measured import Evidence, Point
from hwtune.selector.mix import MixPoint
from hwtune.selector.selection import Basis, DispatchEntry, RankedBackend, Selection

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


def _combined(
    backend: str, parts: Sequence[tuple[Selection, int, str]], joint: Layered | None, one: Costed | None
) -> RankedBackend:
    """One backend's rank entry over every kind. With every kind measured (``joint``), its cost with one tactic per
    shape for every layer (``one``); a backend measured on each kind but with no tactic measured on all of them in
    some phase cannot be costed so and ranks as static. With a kind unmeasured, the layer-weighted mean of the measured
    kinds' own costs and the tactics of the kind with the most layers."""
    costed = [p for p in parts if _measured(p[0])] or list(parts)  # a kind nothing was measured for: left out
    entries = [(e, n, name) for sel, n, name in costed if (e := _entry(sel, backend)) is not None]
    total = sum(n for _, n, _ in entries)
    main = max(entries, key=lambda t: t[1])[0]
    costs = [e.latency_us for e, _, _ in entries]
    if any(e.source == "static" or c is None for (e, _, _), c in zip(entries, costs)):
        return replace(main, source="static", latency_us=None, typical_us=None, confidence=None)
    per_kind = ", ".join(f"{name} {n} x ~{c:.1f} us" for (_, n, name), c in zip(entries, costs))
    if joint is not None:
        if one is None:
            detail = (
                f"no tactic measured on every kind of layer in some phase: not costed over every layer ({per_kind})"
            )
            return replace(main, source="static", latency_us=None, typical_us=None, confidence=None, detail=detail)
        detail = f"one tactic per shape over every layer; each kind's own best: {per_kind}" + (
            f"; {main.detail}" if main.detail else ""
        )
        source = "measured" if one.exact else "interpolated"
        tactics = {**main.tactics, **one.tactics}
        conf = round(one.confidence, 3)
        return replace(
            main, source=source, tactics=tactics, latency_us=one.cost_us, typical_us=one.typical_us, confidence=conf,
            detail=detail,
        )  # fmt: skip
    cost = sum(n * c for (_, n, _), c in zip(entries, costs)) / total  # type: ignore[operator]
    typicals = [(n, e.typical_us) for e, n, _ in entries]  # geometric means layer-weighted: a geometric mean again
    typical = None if any(t is None for _, t in typicals) else geometric_mean(typicals)  # type: ignore[arg-type]
    source = "measured" if all(e.source == "measured" for e, _, _ in entries) else "interpolated"
    confidence = min((e.confidence for e, _, _ in entries if e.confidence is not None), default=None)
    detail = f"per layer ({per_kind})" + (f"; {main.detail}" if main.detail else "")
    return replace(main, source=source, latency_us=cost, typical_us=typical, confidence=confidence, detail=detail)


def _order(
    entries: list[RankedBackend], parts: Sequence[tuple[Selection, int, str]], decided: Sequence[str]
) -> list[RankedBackend]:
    """Measured backends first, then the others in the first kind's order. Costed over every layer (``decided``: the
    joint decision's order), in that order: the decision's rules over every layer (near-ties broken by the worst
    point, extrapolations not deciding). Otherwise, with one kind measured, its own order stands; with several, by
    combined typical latency (``RankedBackend.typical_us``), a backend within ``TIE`` of the cheapest that the
    most-weighted measured kind ranks first winning."""
    costed = [e for e in entries if e.latency_us is not None]
    rest = [e for e in entries if e.latency_us is None]
    if decided:
        return sorted(costed, key=lambda e: decided.index(e.backend)) + rest
    measured_parts = [p for p in parts if _measured(p[0])]
    if len(measured_parts) == 1:
        own = [r.backend for r in measured_parts[0][0].ranked]
        return sorted(costed, key=lambda e: own.index(e.backend)) + rest

    costed.sort(key=lambda e: e.compared_us or 0.0)
    if costed:
        heaviest = max(measured_parts, key=lambda p: p[1])[0]
        near = {e.backend for e in costed if (e.compared_us or 0.0) <= TIE * (costed[0].compared_us or 0.0)}
        first = next((r.backend for r in heaviest.ranked if r.backend in near), costed[0].backend)
        costed.sort(key=lambda e: e.backend != first)  # stable: the rest keep their cost order
    return costed + rest


@dataclass(frozen=True)
class Layered:
    """Every kind's evidence with its layer count, for one tactic serving every layer at each step: a tactic's latency
    at a shape is the layer-weighted mean of each kind's own estimate there (``interpolate.estimate`` per kind, never
    a fit over fitted points), exact where every kind measured that shape, and inside the measured range only where
    it is inside for every kind (an extrapolation of one kind does not decide, as in ``decision``)."""

    kinds: tuple[tuple[Evidence, int], ...]
    basis: Basis  # the mix and the dispatch grid (the same for every kind)

    def tactics(self, backend: str) -> list[str]:
        """``backend``'s tactics measured for every kind."""
        sets = [{t for (b, t, _p) in ev.points if b == backend} for ev, _ in self.kinds]
        return sorted(set.intersection(*sets))

    def at(self, backend: str) -> Estimate:
        """The layer-weighted estimate of each of ``backend``'s tactics at a mix point (``decision.Estimate``)."""
        singles = [(point_estimate(ev, backend), n) for ev, n in self.kinds]
        total = sum(n for _, n in singles)

        def at(tactic: str, mp: MixPoint) -> tuple[float, bool, float, bool] | None:
            ests = [(e, n) for f, n in singles if (e := f(tactic, mp)) is not None]
            if len(ests) < len(singles):
                return None
            latency = sum(n * e[0] for e, n in ests) / total
            return latency, all(e[1] for e, _ in ests), min(e[2] for e, _ in ests), all(e[3] for e, _ in ests)

        return at

    def cost(self, backend: str) -> Costed | None:
        """``backend``'s cost over the mix, one tactic per mix point for every layer; None where some phase has no
        tactic measured for every kind."""
        phases = self.kinds[0][0].measured_phases.get(backend)
        return cost_with(backend, self.tactics(backend), self.at(backend), self.basis.mix, phases)

    def table(self, backend: str) -> tuple[DispatchEntry, ...]:
        """``backend``'s dispatch table over every layer: per cell the tactic of least layer-weighted estimate; where a
        kind's measurements end before the cell, the tactic robust there for that kind (``robust_tactic``; the cheaper
        over every layer where the kinds' robust tactics differ)."""
        at, tactics = self.at(backend), self.tactics(backend)
        phases = sorted({p for ev, _ in self.kinds for (b, _t, p) in ev.points if b == backend})

        def choose(mp: MixPoint, corners: Sequence[MixPoint] = ()) -> tuple[str, float, bool] | None:
            # ties at the centre alone: comparing over the cell's corners (dispatch.cell_minimax) was re-scored worse on
            # a store with two layer kinds (Gemma-2-9B, docs/tuning.md "Tied tactics over the cell"): ``corners`` unused
            ests = {t: e for t in tactics if (e := at(t, mp)) is not None}
            if not ests:
                return None
            robust = {r for ev, _ in self.kinds if (r := robust_tactic(_points(ev, backend, ests, mp), mp)) in ests}
            best = min(robust or ests, key=lambda t: (ests[t][0], t))
            tied = sorted(t for t in ests if ests[t][0] <= dispatch.TIE * ests[best][0])
            if not robust and len(tied) > 1 and not any(ests[t][1] for t in tied):
                best = self._shared_best(backend, tied, mp) or best
            return best, ests[best][0], ests[best][1]

        return table_with(phases, choose, self.basis.max_batch, self.basis.max_context)

    def _shared_best(self, backend: str, tied: Sequence[str], mp: MixPoint) -> str | None:
        """Of ``tied`` tactics, the cheapest by the layer-weighted ``dispatch.shared_estimates`` of every kind (each
        kind's estimates from the shapes all of them were measured at for that kind); None where a kind has none."""
        total = dict.fromkeys(tied, 0.0)
        for ev, n in self.kinds:
            points = _points(ev, backend, tied, mp)
            ests = dispatch.shared_estimates(points, tied, mp) if len(points) == len(tied) else None
            if ests is None:
                return None
            for t in tied:
                total[t] += n * ests[t]
        return min(total, key=lambda t: (total[t], t))


def _points(ev: Evidence, backend: str, tactics: Sequence[str], mp: MixPoint) -> dict[str, Sequence[Point]]:
    return {t: ev.points[(backend, t, mp.phase)] for t in tactics if (backend, t, mp.phase) in ev.points}


def _has_table(sel: Selection) -> bool:
    return bool(sel.dispatch) or (sel.basis is not None and sel.ranked[0].source != "static")


def _table(sel: Selection) -> tuple[DispatchEntry, ...]:
    """A kind's own dispatch table: as given, or built from its basis (``api._select`` leaves it to combine)."""
    if sel.dispatch or sel.basis is None:
        return tuple(sel.dispatch)
    return dispatch_table(sel.basis.evidence, sel.backend, sel.basis.max_batch, sel.basis.max_context)


def _routed_tables(
    joint: Layered | None, one: dict, chosen: str, per_phase: dict[str, str]
) -> tuple[DispatchEntry, ...]:
    """Each phase routed to another backend than ``chosen``: that backend's cells of that phase over every layer;
    none without joint costing (``tactic_for`` then answers with that backend's ranked tactic)."""
    if joint is None:
        return ()
    out: list[DispatchEntry] = []
    for phase, backend in sorted(per_phase.items()):
        if backend != chosen and one.get(backend) is not None:
            out += [e for e in joint.table(backend) if e.phase == phase]
    return tuple(out)


def _layered(parts: Sequence[tuple[Selection, int, str]]) -> Layered | None:
    """Every kind's evidence for joint costing; None unless every kind was ranked from measurements."""
    bases = [(sel.basis, n) for sel, n, _ in parts]
    if any(b is None for b, _ in bases) or not all(_measured(sel) for sel, _, _ in parts):
        return None
    first = bases[0][0]
    assert first is not None
    return Layered(tuple((b.evidence, n) for b, n in bases if b is not None), first)


def _kind_notes(
    parts: Sequence[tuple[Selection, int, str]], chosen: str, agreed: bool, decided: str | None
) -> list[str]:
    """What a combined selection says: how it was ranked, kinds left unmeasured, lost per-phase routing, and the
    kinds' own notes (those common to all once; a kind's others only where its own winner is the chosen backend,
    since they describe that winner). With a decision over every layer (``decided``: its note, possibly empty), the
    kinds' own decision notes give way to it, as they describe rankings the combined one replaces."""
    layers = ", ".join(f"{n} {name}" for _, n, name in parts)
    unmeasured = [name for sel, _, name in parts if not _measured(sel)]
    how = "its cost weighted by layer count" if len(unmeasured) < len(parts) else "nothing measured for any kind"
    notes = [f"ranked over every layer ({layers}): one backend serves them all, {how}"]
    if unmeasured and len(unmeasured) < len(parts):
        notes.append(
            f"nothing measured for the {' and '.join(unmeasured)} layers here: ranked by the other layers' costs "
            "only (`hwtune tune --model` measures every kind)"
        )
    if not agreed:
        notes.append("the measured layer kinds' per-phase winners differ: no per-phase routing")

    def kept(sel: Selection) -> list[str]:
        dropped = sel.basis.decided if decided is not None and sel.basis is not None else ()
        return [n for n in sel.notes if n not in dropped]

    first = kept(parts[0][0])
    common = [n for n in first if all(n in kept(sel) for sel, _, _ in parts)]
    own = [
        f"{name} layers: {n}" for sel, _, name in parts if sel.backend == chosen for n in kept(sel) if n not in common
    ]
    return notes + common + ([decided] if decided else []) + own


def combine(parts: Sequence[tuple[Selection, int, str]]) -> Selection:
    """One selection for a model of several layer kinds (``parts``: each kind's selection, its layer count and name;
    the first is the model's own spec), ranked by cost over every layer (module docstring). ``unmeasured_layers``
    names the kinds whose costs are missing, so that layouts and block sizes are compared on like costs."""
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
    joint = _layered(parts)
    one = {b: joint.cost(b) for b in valid} if joint is not None else {}
    costed = [c for c in one.values() if c is not None]
    order, decided = decide_one(costed, joint.basis.mix) if joint is not None and costed else ([], None)
    ranked = _order([_combined(b, parts, joint, one.get(b)) for b in valid], parts, order)
    chosen = next(e for e in ranked if e.backend == first.requested) if first.requested else ranked[0]
    measured = [sel for sel, _, _ in parts if _measured(sel)] or [first]
    agree = {ph: b for ph, b in measured[0].per_phase.items() if all(sel.per_phase.get(ph) == b for sel in measured)}
    notes = _kind_notes(parts, chosen.backend, joint is not None or agree == dict(measured[0].per_phase), decided)
    if joint is not None:  # each phase's winner over every layer
        agree = per_phase_winners(costed, joint.basis.mix)
    dispatch: tuple[DispatchEntry, ...] = ()
    if joint is not None and one.get(chosen.backend) is not None:
        dispatch = joint.table(chosen.backend)
        notes.append("tactics and tactic_for from every layer's measurements: one tactic per shape, weighted by layers")
    elif joint is None:
        own = [(sel, n, name) for sel, n, name in parts if sel.backend == chosen.backend and _has_table(sel)]
        if own:
            sel, _, name = max(own, key=lambda p: p[1])
            dispatch = _table(sel)
            notes.append(f"tactic_for answers from the {name} layers' measurements")
    return replace(
        first,
        backend=chosen.backend,
        tactics=dict(chosen.tactics),
        ranked=tuple(ranked),
        rejected=rejected,
        notes=tuple(notes),
        per_phase=agree,
        dispatch=dispatch,
        phase_dispatch=_routed_tables(joint, one, chosen.backend, agree),
        differences=tuple(dict.fromkeys(d for sel, _, _ in parts for d in sel.differences)),
        unmeasured_layers=tuple(name for sel, _, name in parts if not _measured(sel)),
        basis=None,  # the kinds' evidence served this ranking; no one spec's does
    )
