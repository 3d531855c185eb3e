"""Selection for an engine target (vLLM 0.33.0, SGLang 0.5.23, ...): the engine version's backends, its order and its
rules, from its snapshot (``hwtune.core.catalogue.engines``; docs/engines.md).

A validating engine (vLLM) tries its priority list for the device and takes the first backend its rules accept;
hwtune ranks the same list the same way, so with nothing measured its first choice is the engine's, except where
hwtune deliberately differs: a backend the engine's selector accepts and which then fails at start is rejected up
front (``hwtune.core.engine_validation``), and the Selection says so (``differences``, ``--explain``). A deciding
engine (SGLang) picks its default from a decision list; hwtune's candidates are that default first, then the other
backends it accepts when given one by ``--attention-backend`` (the snapshot's ``explicit`` section), so that with
nothing measured the choice is its default and measurements can rank the others.

Measurements are of the records hwtune runs; an engine backend is ranked by the record it is built on
(``catalogue.engine_record``: vLLM's FLASHINFER by FLASHINFER, SGLang's trtllm_mha by FLASHINFER's trtllm-gen
tactic). Engine backends hwtune runs no kernel of (vLLM's TRITON_ATTN, SGLang's triton) keep their static place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hwtune.core import catalogue
from hwtune.core.catalogue import Backend
from hwtune.core.catalogue.engines import (
    EngineConfig,
    EngineTarget,
    decide,
    engine_page_size,
    explicit_order,
    explicit_reasons,
    hwtune_tactics,
    order,
    preferred_block_size,
    priorities_source,
    serves,
    short_source,
)
from hwtune.core.devices import DeviceProfile
from hwtune.core.engine_validation import DELIBERATE, config_for, judge
from hwtune.core.errors import UnknownBackendError
from hwtune.core.types import AttentionSpec
from hwtune.core.validation import Rejection, package_rejections, valid_tactics
from hwtune.selector.measured import Evidence
from hwtune.selector.selection import RankedBackend


@dataclass
class EngineField:
    """An engine target's candidates for one spec: the engine's backends in its order, the valid ones, every
    rejection, what the engine itself would choose, and hwtune's deliberate differences that apply."""

    target: EngineTarget
    cfg: EngineConfig
    names: list[str]
    valid: list[str]
    rejected: dict[str, list[Rejection]]
    engine_choice: str | None
    differences: list[str] = field(default_factory=list)
    detail: str = ""
    #: Per backend, where its static place comes from, where it differs from ``detail`` (SGLang's non-defaults).
    details: dict[str, str] = field(default_factory=dict)
    #: Notes on the engine's own choice, given when it is chosen (SGLang's default where hwtune's model of what
    #: SGLang accepts by name would refuse it).
    notes: list[str] = field(default_factory=list)


def _hwtune_only(target: EngineTarget, mla: bool) -> dict[str, list[Rejection]]:
    """hwtune's records that are no backend of the engine (TORCH_SDPA, hwtune's own kernels), each with why."""
    out = {}
    for b in catalogue.backends("attention"):
        flags = b.engines.get(target.engine)
        if b.has(catalogue.Feature.MLA) != mla or (flags is not None and (flags.args or flags.by_tactic)):
            continue
        why = flags.missing if flags is not None and flags.missing else f"{target.snapshot.display} has no such backend"
        out[b.name] = [Rejection("engine", f"{b.name} is not one of {target.describe()}'s backends: {why}.")]
    return out


def engine_field(
    target: EngineTarget, spec: AttentionSpec, device: DeviceProfile, assume_installed: bool
) -> EngineField:
    """The engine target's candidates for ``spec`` on CUDA ``device`` (module docstring)."""
    cfg = config_for(target, spec, device, assume_installed)
    snap, version = target.snapshot, target.version
    if snap.selector == "decision":
        return _decision_field(target, spec, device, cfg, assume_installed)
    names = order(snap, version, cfg)
    verdicts = {n: judge(target, n, spec, device, cfg, assume_installed=assume_installed) for n in names}
    rejected = {n: v.reasons for n, v in verdicts.items() if v.reasons}
    valid = [n for n in names if n not in rejected]
    engine_choice = next((n for n in names if not verdicts[n].engine), None)
    differences = [r.message for v in verdicts.values() for r in v.deliberate]
    rejected.update(_hwtune_only(target, cfg.mla))
    cc = f"SM {device.compute_capability[0]}.{device.compute_capability[1]}"  # type: ignore[index]
    detail = f"{target.describe()} priority for {cc} ({short_source(priorities_source(snap, version, cfg))})"
    return EngineField(target, cfg, names, valid, rejected, engine_choice, differences, detail)


def _decision_field(
    target: EngineTarget, spec: AttentionSpec, device: DeviceProfile, cfg: EngineConfig, assume_installed: bool
) -> EngineField:
    """A deciding engine's (SGLang's) candidates: its default for ``cfg`` first, then, in the snapshot's stated order,
    the backends it accepts as themselves when given by ``--attention-backend``; none when it refuses the spec."""
    snap, version = target.snapshot, target.version
    name, sources = decide(snap, version, cfg)
    rejected = _hwtune_only(target, cfg.mla)
    if name is None:
        vocab = ", ".join(snap.kv_cache_dtypes(version))
        why = f"{target.describe()} does not accept kv-cache dtype {cfg.kv_cache_dtype} (its choices: {vocab})."
        rejected[f"{snap.display} default"] = [Rejection("kv_cache_dtype", why)]
        return EngineField(target, cfg, [], [], rejected, None)
    names = [name] + [n for n in explicit_order(snap, version) if n != name and serves(snap, version, n, cfg)]
    judged = {n: explicit_reasons(snap, version, n, cfg) for n in names}
    for n in names:
        mapped = catalogue.engine_record(target.engine, n, cfg.mla)
        problems = _package_problems(mapped[0], device, assume_installed) if mapped else []
        if n != name and judged[n]:
            rejected[n] = [Rejection(r.code, r.message) for r in judged[n]]
        elif problems:
            rejected[n] = problems
    valid = [n for n in names if n not in rejected]
    scope = {c["id"] for c in snap.data.get("explicit", {}).get("scope", [])}
    doubts = [r for r in judged[name] if r.check_id not in scope]
    notes = []
    if doubts:  # SGLang's own default, refused by the rules of what it accepts by name: said, not overruled
        notes.append(
            f"{name} is {target.describe()}'s default here, which hwtune gives as is; asked for by name, hwtune's "
            f"model of what {target.describe()} accepts would refuse it: {doubts[0].message}"
        )
    detail = f"{target.describe()}'s default here ({short_source(sources[-1])})"
    others = f"accepted by {target.describe()} when given by --attention-backend (the snapshot's explicit order)"
    details = {n: others for n in names[1:]}
    return EngineField(target, cfg, names, valid, rejected, name, [], detail, details, notes)


def _package_problems(record: Backend, device: DeviceProfile, assume_installed: bool) -> list[Rejection]:
    return package_rejections(record, assume_installed=assume_installed, device=device, who=record.name)


def requested_name(target: EngineTarget, requested: str, mla: bool) -> str:
    """The engine's spelling of a requested backend; a hwtune record the engine does not offer keeps its name (its
    rejection says why); anything else is an UnknownBackendError listing the engine's backends."""
    snap = target.snapshot
    vocab = snap.engine_fact("attention_backends", target.version)
    offered = snap.backend_names() + [n for n in (vocab.value if vocab else []) if n not in snap.backend_names()]
    for name in offered:
        if name.lower() == requested.strip().lower():
            return name
    record = catalogue.find(requested)
    if record is not None and record.kind == "attention":
        return record.name
    listed = [n for n in offered if not {"sparse", "mm_prefix_only"} & set(snap.backend(n) or {})]
    raise UnknownBackendError(requested, "attention", [*listed, f"(those of {target.describe()}; --engine changes it)"])


def admit_request(fld: EngineField, requested: str | None) -> str | None:
    """A deciding engine (SGLang) validates an explicitly requested backend itself: one of its ``--attention-backend``
    choices that hwtune's snapshot does not model (``explicit.order``) is taken as asked, with a note; a modelled one
    is valid or rejected by the snapshot's rules. None when the request needs no admission (or is not the engine's)."""
    snap = fld.target.snapshot
    vocab = snap.engine_fact("attention_backends", fld.target.version)
    if snap.selector != "decision" or requested is None or requested in fld.valid or vocab is None:
        return None
    if requested not in vocab.value or requested in explicit_order(snap, fld.target.version):
        return None
    fld.valid.insert(0, requested)
    fld.rejected.pop(requested, None)
    return (
        f"{requested} taken as requested: {fld.target.describe()} validates an explicit --attention-backend itself "
        f"(hwtune's snapshot does not model what it accepts of {requested}; its default here: "
        f"{fld.engine_choice or 'none'})"
    )


def tactics_for(
    target: EngineTarget, name: str, spec: AttentionSpec, device: DeviceProfile, assume_installed: bool
) -> dict[str, str]:
    """The tactic per phase hwtune would measure an engine backend by: the one the engine names (SGLang's
    trtllm_mha), or the snapshot's (SGLang's flashinfer), else the record's preferred valid tactic; "default" where
    hwtune runs no kernel of it."""
    from hwtune.selector.api import static_tactics

    mapped = catalogue.engine_record(target.engine, name, spec.use_mla)
    if mapped is None:
        return {"decode": "default", "prefill": "default"}
    named = _snapshot_tactics(target, name, spec, device)
    if named is not None:
        return named
    record, tactic = mapped
    if tactic is not None:
        return {"decode": tactic, "prefill": tactic}
    free = dataclasses.replace(spec, block_size=None)  # the engine splits its blocks into the kernel's pages
    if all(valid_tactics(record, free, device, p, assume_installed=True) for p in ("decode", "prefill")):
        return static_tactics(record, free, device, assume_installed=True)
    return {"decode": "default", "prefill": "default"}


def static_ranking(
    fld: EngineField, spec: AttentionSpec, device: DeviceProfile, assume_installed: bool
) -> list[RankedBackend]:
    """The valid engine backends in the engine's order, each with its tactics and where its place comes from."""
    return [
        RankedBackend(
            backend=n,
            source="static",
            tactics=tactics_for(fld.target, n, spec, device, assume_installed),
            detail=fld.details.get(n, fld.detail),
        )
        for n in fld.valid
    ]


def _snapshot_tactics(
    target: EngineTarget, name: str, spec: AttentionSpec, device: DeviceProfile
) -> dict[str, str] | None:
    """The record's tactic per phase that is the kernel the engine runs, where the snapshot names it."""
    if device.compute_capability is None or target.snapshot.selector != "decision":
        return None
    cfg = config_for(target, spec, device, assume_installed=True)
    return hwtune_tactics(target.snapshot, target.version, name, cfg)


def renamed_evidence(ev: Evidence, fld: EngineField) -> Evidence:
    """The measurements of the records the engine's backends are built on, under the engine's names (a backend the
    engine names one tactic of keeps that tactic's points only, and one whose kernel per phase the snapshot names
    keeps those points only); records the engine does not offer drop out, and so do tactics no engine calls
    (``Tactic.hwtune_only``: FLASHINFER's xqa-2x)."""
    out = Evidence(notes=list(ev.notes))
    snap, version = fld.target.snapshot, fld.target.version
    for name in fld.names:
        mapped = catalogue.engine_record(fld.target.engine, name, fld.cfg.mla)
        if mapped is None:
            continue
        record, tactic = mapped
        per_phase = hwtune_tactics(snap, version, name, fld.cfg) if snap.selector == "decision" else None
        if per_phase is not None and "default" in per_phase.values():
            continue  # a phase runs a kernel hwtune does not: the backend keeps its static place
        for (backend, tac, phase), points in ev.points.items():
            if backend != record.name or getattr(record.tactic(tac), "hwtune_only", False):
                continue  # another record's, or a call of the kernel no engine makes
            if (per_phase.get(phase) == tac) if per_phase is not None else tactic in (None, tac):
                out.points[(name, tac, phase)] = points
        named = sorted(set(per_phase.values())) if per_phase else [tactic] if tactic is not None else []
        by_tactic = ev.disqualified_by_tactic.get(record.name, {})
        failed = ev.disqualified.get(record.name) if not named else [f for t in named for f in by_tactic.get(t, [])]
        if failed:  # a backend built on some tactics answers for those tactics' failures only
            out.disqualified[name] = failed
        if record.name in ev.caveats:
            out.caveats[name] = ev.caveats[record.name]
        if record.name in ev.measured_phases:
            out.measured_phases[name] = ev.measured_phases[record.name]
    return out


def block_lookups(fld: EngineField, spec: AttentionSpec) -> list[tuple[AttentionSpec, set[str] | None]]:
    """Which stored specs hold the measurements of each candidate: the spec itself, or, when no block size was
    given, the spec at each backend's preferred block size (the size the engine will run it at), read for the
    records of the backends that prefer it. A deciding engine (SGLang) runs some backends at a page size of its own
    whether one is given or not (flashmla at 64): each is read at the size it runs at."""
    snap, version = fld.target.snapshot, fld.target.version
    decision = snap.selector == "decision"
    if spec.block_size is not None and not decision:
        return [(spec, None)]
    by_size: dict[int, set[str]] = {}
    for name in fld.names:
        mapped = catalogue.engine_record(fld.target.engine, name, fld.cfg.mla)
        if mapped is not None:
            if decision:
                size = engine_page_size(snap, version, name, fld.cfg)
            else:
                size = preferred_block_size(snap, version, name, fld.cfg)
            by_size.setdefault(size, set()).add(mapped[0].name)
    if decision and set(by_size) <= {spec.block_size}:
        return [(spec, None)]
    return [(dataclasses.replace(spec, block_size=size), records) for size, records in sorted(by_size.items())]


def engine_notes(fld: EngineField, chosen: str | None, measured: bool, requested: bool = False) -> list[str]:
    """What the selection followed, the block size the engine will use, and, when hwtune's static choice is not the
    engine's, which deliberate difference made it so."""
    snap, version = fld.target.snapshot, fld.target.version
    taken = snap.data["versions"][version].get("snapshot_taken", "?")
    notes = [f"backends, order and rules of {fld.target.describe()} (snapshot of {taken}; docs/engines.md)"]
    notes += fld.notes if chosen == fld.engine_choice else []
    if chosen is not None and fld.cfg.block_size is None and snap.selector != "decision":
        size = preferred_block_size(snap, version, chosen, fld.cfg)
        notes.append(f"no block size given: {fld.target.describe()} runs {chosen} at block size {size}")
    if chosen is not None and snap.selector == "decision" and chosen in fld.names:
        size = engine_page_size(snap, version, chosen, fld.cfg)
        default = int(snap.engine_fact("default_block_size", version).value)  # type: ignore[union-attr]
        if size != (fld.cfg.block_size if fld.cfg.block_size is not None else default):
            given = f"--page-size {fld.cfg.block_size}" if fld.cfg.block_size is not None else "no page size given"
            notes.append(f"{fld.target.describe()} runs {chosen} at page size {size} ({given})")
    if not (measured or requested) and fld.engine_choice is not None and chosen != fld.engine_choice:
        engine, theirs = fld.target.describe(), fld.engine_choice
        reasons = fld.rejected.get(theirs, [])
        on_purpose = [r.message for r in reasons if r.code.startswith(DELIBERATE)]
        if on_purpose:
            notes.append(
                f"hwtune differs from {engine} here on purpose: {engine} would choose {theirs} ({on_purpose[0]})"
            )
        elif reasons:
            notes.append(f"{engine} would choose {theirs}, which cannot be used here: {reasons[0].message}")
    return notes


def deliberate_codes(rejected: dict[str, Any]) -> list[str]:
    """The ids of the deliberate differences among ``rejected``'s reasons."""
    return sorted({r.code[len(DELIBERATE) :] for rs in rejected.values() for r in rs if r.code.startswith(DELIBERATE)})
