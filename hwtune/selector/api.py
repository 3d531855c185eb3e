"""select_attention / select_all2all: the engine-init entry points.

Cheap and safe at engine start: no torch import, no CUDA initialisation (devices come from NVML or a
simulated profile), and a process-wide cache so that asking again for the same spec costs microseconds.
Validation runs first; an explicit request is honoured only when valid and is a loud error otherwise;
ranking is by the static priorities of the device's architecture family (measured ranking plugs in via
``ranker``).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from hwtune.core import catalogue
from hwtune.core.catalogue import Backend
from hwtune.core.catalogue.engines import DEFAULT_ENGINE, EngineTarget, resolve_target
from hwtune.core.catalogue.priorities import backend_order, describe_family, tactic_order
from hwtune.core.devices import DeviceProfile, simulated
from hwtune.core.errors import BackendNotValidError, NoValidBackendError
from hwtune.core.types import All2AllSpec, AttentionSpec, Spec
from hwtune.core.validation import Rejection, check, phases_of, valid_tactics
from hwtune.selector.block_sizes import over_block_sizes
from hwtune.selector.decision import rank as measured_rank
from hwtune.selector.dispatch import dispatch_table, phase_dispatch
from hwtune.selector.engine_select import (
    EngineField,
    admit_request,
    block_lookups,
    engine_field,
    engine_notes,
    renamed_evidence,
    requested_name,
    static_ranking,
)
from hwtune.selector.layer_kinds import check_layers, combine, layer_specs
from hwtune.selector.layouts import over_layouts
from hwtune.selector.lifted import Tested, lift, tested_here
from hwtune.selector.messages import ENV_VARS, engine_not_valid_message, no_valid_message, not_valid_message
from hwtune.selector.mix import MixPoint, all2all_mix, load_mix, workload_mix
from hwtune.selector.ranks import agree
from hwtune.selector.selection import Basis, RankedBackend, Selection

DeviceArg = str | DeviceProfile


def resolve_device(device: DeviceArg) -> DeviceProfile:
    """``"auto"`` reads this machine through NVML (no CUDA init); a name gives a simulated profile."""
    if isinstance(device, DeviceProfile):
        return device
    if device.strip().lower() == "auto":
        from hwtune.core.detect import detect  # NVML only; never imports torch

        return detect()
    return simulated(device)


def static_tactics(backend: Backend, spec: Spec, device: DeviceProfile, *, assume_installed: bool) -> dict[str, str]:
    """The preferred valid tactic per phase, by the family's tactic order, else declaration order."""
    out: dict[str, str] = {}
    for phase in phases_of(spec):
        valid = [t.name for t in valid_tactics(backend, spec, device, phase, assume_installed=assume_installed)]
        preferred = [n for n in tactic_order(backend, device.family, phase) if n in valid]
        out[phase] = (preferred or valid)[0]
    return out


def _requested(kind: str, backend: str | None) -> tuple[str | None, str]:
    if backend and backend.strip().lower() != "auto":
        return backend, "backend argument / --backend"
    env = os.environ.get(ENV_VARS[kind], "").strip()
    if env and env.lower() != "auto":
        return env, f"{ENV_VARS[kind]}={env}"
    return None, ""


def _evidence(
    kind: str,
    spec: Spec,
    device: DeviceProfile,
    db: str | bool | None,
    lookups: list[tuple[Spec, set[str] | None]] | None = None,
) -> tuple[Any, dict[str, Tested] | None, list[str]]:
    """This environment's measurements of ``spec`` from the store, aggregated for ranking and as each backend's
    passes and failures (both None when no store answers). ``lookups`` reads other stored specs instead, each for
    the named records only (an engine runs each backend at its own block size when none is given)."""
    if db is False:
        return None, None, ["no measurement store consulted (db=False)"]
    from hwtune.core.environment import current_environment
    from hwtune.db.sqlite_direct import read_for_selection  # stdlib sqlite3 for local stores; no SQLAlchemy
    from hwtune.selector.measured import gather

    rows: list[tuple] = []
    fingerprints: dict[str, Any] = {}
    notes: list[str] = []
    for stored, records in lookups or [(spec, None)]:
        got, fps, said = read_for_selection(db if isinstance(db, str) else None, stored.key(), kind)
        notes += [n for n in said if n not in notes]
        if got is None:
            return None, None, notes
        rows += [r for r in got if records is None or r[7] in records]
        fingerprints.update(fps)
    env = current_environment(device)
    ev = gather(rows, fingerprints, env.hash(), env.fingerprint())
    if not ev.points and not ev.disqualified:
        notes.append(
            f"no measurements of this spec in this environment ({len(rows)} stored for it elsewhere)"
            if rows
            else "no measurements of this spec stored"
        )
    return ev, tested_here(rows, env.hash()), notes


def _mix(kind: str, spec: Spec, max_num_seqs: int, max_model_len: int, profile: str) -> list[MixPoint]:
    if profile.endswith((".json", ".toml")) or "/" in profile:
        return load_mix(profile, kind)
    if kind == "all2all":
        return all2all_mix(max_num_seqs, profile)
    assert isinstance(spec, AttentionSpec)
    return workload_mix(max_num_seqs, max_model_len, profile, spec.query_len_decode)


def _valid_set(
    kind: str,
    spec: Spec,
    device: DeviceProfile,
    assume_installed: bool,
    evidence: Any,
    tested: dict[str, Tested] | None = None,
) -> tuple[list[Backend], dict[str, list[Rejection]], list[str]]:
    """The backends the catalogue allows for ``spec`` here, plus those whose activation-dtype rule a passing
    measurement here lifts (``selector.lifted``, with a note each), minus those measured crashing or wrong here."""
    rejections: dict[str, list[Rejection]] = {}
    valid: list[Backend] = []
    lifted_notes: list[str] = []
    for b in catalogue.backends(kind):
        reasons = check(b, spec, device, assume_installed=assume_installed)
        lifted, reasons, note = lift(b, spec, device, reasons, tested, assume_installed=assume_installed)
        if reasons:
            rejections[b.name] = reasons
        else:
            valid.append(lifted or b)
            lifted_notes += [note] if note else []
    if evidence is not None:  # measured facts: a crash or a wrong answer here rejects the backend
        for name, facts in evidence.disqualified.items():
            if any(b.name == name for b in valid):
                rejections[name] = [Rejection("measured", f) for f in facts[:3]]
                valid = [b for b in valid if b.name != name]
    return valid, rejections, lifted_notes


def _static_ranking(
    kind: str, spec: Spec, device: DeviceProfile, valid: list[Backend], assume_installed: bool
) -> list[RankedBackend]:
    """The valid backends in the static order of the device's architecture family."""
    mla = isinstance(spec, AttentionSpec) and spec.use_mla
    declared = catalogue.backends(kind)
    order = list(backend_order(kind, mla, device.family))
    position = {name: i for i, name in enumerate(order)}
    names = [b.name for b in declared]  # by name: a record whose rule was lifted is a copy of the declared one
    ordered = sorted(valid, key=lambda b: (position.get(b.name, len(order)), names.index(b.name)))
    return [
        RankedBackend(
            backend=b.name,
            source="static",
            tactics=static_tactics(b, spec, device, assume_installed=assume_installed),
            detail=f"static priority for {describe_family(device.family)}",
        )
        for b in ordered
    ]


def _choose(
    ranked: list[RankedBackend],
    requested: str | None,
    not_valid: Callable[[], Exception],
    none_valid: Callable[[], Exception],
) -> RankedBackend:
    """The requested backend when it is among the ranked (valid) ones, else ``not_valid()`` is raised (a loud error,
    never a silent fallback); without a request the first ranked one, or ``none_valid()`` when none is valid."""
    if requested is not None:
        chosen = next((r for r in ranked if r.backend == requested), None)
        if chosen is None:
            raise not_valid()
        return chosen
    if not ranked:
        raise none_valid()
    return ranked[0]


def _catalogue_errors(
    kind: str,
    spec: Spec,
    device: DeviceProfile,
    requested: Backend | None,
    how: str,
    ranked: list[RankedBackend],
    rejections: dict[str, list[Rejection]],
) -> tuple[Callable[[], Exception], Callable[[], Exception]]:
    """The errors of a selection from hwtune's catalogue: the requested backend is not valid; none is."""
    valid = [r.backend for r in ranked]

    def not_valid() -> Exception:
        assert requested is not None
        reasons = rejections.get(requested.name, [])
        message = not_valid_message(kind, requested, reasons, valid, spec, device, how)
        return BackendNotValidError(message, backend=requested.name, reasons=[r.message for r in reasons], valid=valid)

    def none_valid() -> Exception:
        rejected = {name: [r.message for r in rs] for name, rs in rejections.items()}
        return NoValidBackendError(no_valid_message(kind, rejections, spec, device), rejected)

    return not_valid, none_valid


def _grid_context(max_model_len: int) -> int:
    """The longest context the dispatch grid covers."""
    return max(max_model_len, 16)


def _basis(
    evidence: Any, mix: list[MixPoint], max_num_seqs: int, max_model_len: int, keep: bool, decided: list[str]
) -> Basis | None:
    """What a measured ranking was built on and the notes of its decision, kept (``keep``) for combining a model's
    layer kinds; None without usable measurements."""
    if not keep or evidence is None or not evidence.points:
        return None
    return Basis(evidence, tuple(mix), max_num_seqs, _grid_context(max_model_len), tuple(decided))


def _select(
    kind: str,
    spec: Spec,
    device: DeviceProfile,
    requested: str | None,
    how: str,
    assume_installed: bool,
    db: str | bool | None = False,
    max_num_seqs: int = 256,
    max_model_len: int = 32768,
    profile: str = "balanced",
    target: EngineTarget | None = None,
    keep_basis: bool = False,
) -> Selection:
    """One spec's selection; ``keep_basis``: keep the evidence and mix it was ranked on (``Selection.basis``) and
    leave the dispatch table to ``layer_kinds.combine``, which builds the one it needs from them."""
    if target is not None and kind == "attention" and device.is_cuda:
        assert isinstance(spec, AttentionSpec)
        args = (requested, how, assume_installed, db, max_num_seqs, max_model_len, profile, keep_basis)
        return _select_engine(spec, device, target, *args)
    requested_backend = catalogue.get(kind, requested) if requested else None  # unknown name: exit 2
    mix = _mix(kind, spec, max_num_seqs, max_model_len, profile)  # bad profile: exit 2 before any I/O
    evidence, tested, notes = _evidence(kind, spec, device, db)
    valid, rejections, lifted = _valid_set(kind, spec, device, assume_installed, evidence, tested)
    notes += lifted
    ranked, per_phase, dispatch = _static_ranking(kind, spec, device, valid, assume_installed), {}, ()
    routed: tuple = ()
    decided: list[str] = []
    if evidence is not None:
        notes = notes + evidence.notes
        ranked, per_phase, decided = measured_rank(ranked, evidence, mix)
        notes += decided
    if not any(r.source != "static" for r in ranked):
        notes.append(f"static priorities for {describe_family(device.family)}")
    for b in valid:  # measured run-time failure modes the spec cannot rule out: say how to avoid them
        notes += [f"{b.name}: {h.message} ({h.source})" for h in b.hazards if h.applies(spec)]
    errors = _catalogue_errors(kind, spec, device, requested_backend, how, ranked, rejections)
    chosen = _choose(ranked, requested_backend.name if requested_backend else None, *errors)
    if evidence is not None and chosen.source != "static" and not keep_basis:  # combine builds what it needs
        dispatch = dispatch_table(evidence, chosen.backend, max_num_seqs, _grid_context(max_model_len))
        routed = phase_dispatch(evidence, chosen.backend, per_phase, max_num_seqs, _grid_context(max_model_len))
    if target is not None and kind == "attention":
        notes.append(
            f"the {target.describe()} snapshot states CUDA GPUs only: hwtune's own catalogue and order on "
            f"{device.describe()}"
        )
    return Selection(
        kind=kind,
        spec=spec.to_dict(),
        device=device,
        backend=chosen.backend,
        tactics=dict(chosen.tactics),
        ranked=tuple(ranked),
        rejected={name: tuple(r.message for r in rs) for name, rs in rejections.items()},
        requested=requested_backend.name if requested_backend else None,
        notes=tuple(notes),
        per_phase=per_phase,
        dispatch=dispatch,
        phase_dispatch=routed,
        basis=_basis(evidence, mix, max_num_seqs, max_model_len, keep_basis, decided),
    )


def _measured_out(fld: EngineField, evidence: Any, rejected: dict[str, list[Rejection]]) -> None:
    """Backends measured crashing or giving wrong answers here leave the engine field's valid set."""
    for name, facts in evidence.disqualified.items():
        if name in fld.valid:
            rejected[name] = [Rejection("measured", f) for f in facts[:3]]
            fld.valid.remove(name)


def _engine_errors(
    fld: EngineField,
    spec: AttentionSpec,
    device: DeviceProfile,
    requested: str | None,
    how: str,
    ranked: list[RankedBackend],
    rejected: dict[str, list[Rejection]],
) -> tuple[Callable[[], Exception], Callable[[], Exception]]:
    """The errors of a selection for an engine target: the requested engine backend is not valid; none is."""
    target, valid = fld.target, [r.backend for r in ranked]

    def not_valid() -> Exception:
        from hwtune.core.engine_validation import judge

        assert requested is not None
        reasons = (
            rejected.get(requested) or judge(target, requested, spec, device, fld.cfg, assume_installed=True).reasons
        )
        message = engine_not_valid_message(target.describe(), requested, reasons, valid, device, how)
        return BackendNotValidError(message, backend=requested, reasons=[r.message for r in reasons], valid=valid)

    def none_valid() -> Exception:
        message = no_valid_message("attention", rejected, spec, device, f" with {target.describe()}")
        return NoValidBackendError(message, {name: [r.message for r in rs] for name, rs in rejected.items()})

    return not_valid, none_valid


def _select_engine(
    spec: AttentionSpec,
    device: DeviceProfile,
    target: EngineTarget,
    requested: str | None,
    how: str,
    assume_installed: bool,
    db: str | bool | None,
    max_num_seqs: int,
    max_model_len: int,
    profile: str,
    keep_basis: bool = False,
) -> Selection:
    """Selection for an engine target on a CUDA device: the engine version's backends in its order, by its rules
    (``selector.engine_select``), ranked by measurements of the records they are built on where the store has them."""
    mix = _mix("attention", spec, max_num_seqs, max_model_len, profile)  # bad profile: exit 2 before any I/O
    fld = engine_field(target, spec, device, assume_installed)
    name = requested_name(target, requested, spec.use_mla) if requested else None  # unknown: exit 2
    admitted = admit_request(fld, name)
    evidence, _tested, notes = _evidence("attention", spec, device, db, block_lookups(fld, spec))
    notes += [admitted] if admitted else []
    rejected = fld.rejected  # measured failures join it: the notes then say why the engine's choice is not taken
    if evidence is not None:
        evidence = renamed_evidence(evidence, fld)
        _measured_out(fld, evidence, rejected)
    ranked, per_phase, dispatch = static_ranking(fld, spec, device, assume_installed), {}, ()
    routed: tuple = ()
    decided: list[str] = []
    if evidence is not None:
        notes = notes + evidence.notes
        # an engine prefills MLA on a path its decode-only MLA backends share: vLLM on its MLA prefill backend, chosen
        # apart from the decode backend; SGLang's flashmla on its flashinfer backend's (FlashMLABackend subclasses
        # FlashInferMLAAttnBackend)
        ranked, per_phase, decided = measured_rank(ranked, evidence, mix, shared=spec.use_mla)
        notes += decided
    measured = any(r.source != "static" for r in ranked)
    chosen = _choose(ranked, name, *_engine_errors(fld, spec, device, name, how, ranked, rejected))
    notes += engine_notes(fld, chosen.backend, measured, requested=name is not None)
    if measured and chosen.source != "static" and not keep_basis:  # combine builds what it needs
        dispatch = dispatch_table(evidence, chosen.backend, max_num_seqs, _grid_context(max_model_len))
        routed = phase_dispatch(evidence, chosen.backend, per_phase, max_num_seqs, _grid_context(max_model_len))
    return Selection(
        kind="attention",
        spec=spec.to_dict(),
        device=device,
        backend=chosen.backend,
        tactics=dict(chosen.tactics),
        ranked=tuple(ranked),
        rejected={n: tuple(r.message for r in rs) for n, rs in rejected.items()},
        requested=name,
        notes=tuple(notes),
        per_phase=per_phase,
        dispatch=dispatch,
        phase_dispatch=routed,
        engine=target.to_dict(),
        differences=tuple(fld.differences),
        basis=_basis(evidence, mix, max_num_seqs, max_model_len, keep_basis, decided),
    )


@functools.lru_cache(maxsize=1024)
def _cached(
    kind: str,
    spec: Spec,
    device: DeviceProfile,
    requested: str | None,
    how: str,
    assume_installed: bool,
    db: str | bool | None,
    max_num_seqs: int,
    max_model_len: int,
    profile: str,
    target: EngineTarget | None = None,
    layers: tuple[int, int] | None = None,
) -> Selection:
    def one(s: Spec) -> Selection:
        args = (requested, how, assume_installed, db, max_num_seqs, max_model_len, profile, target)
        if layers is None or not isinstance(s, AttentionSpec):
            return _select(kind, s, device, *args)
        kinds = layer_specs(s, *layers)  # every kind of layer, one backend for all (selector/layer_kinds.py)
        return combine([(_select(kind, k, device, *args, keep_basis=True), n, name) for k, n, name in kinds])

    def laid_out(s: Spec) -> Selection:
        if isinstance(s, AttentionSpec) and s.kv_layout == "auto" and db is not False:
            return over_layouts(one, s)  # the layout is decided by measurement (selector/layouts.py)
        return one(s)

    engine_reads_sizes = target is not None and device.is_cuda  # engine_select.block_lookups
    if isinstance(spec, AttentionSpec) and spec.block_size is None and db is not False and not engine_reads_sizes:
        return over_block_sizes(laid_out, spec)  # the block size is decided by measurement (selector/block_sizes.py)
    return laid_out(spec)


def clear_cache() -> None:
    """Forget this process's warm selections, so the next calls read the store again: for a long-lived process
    whose store changed (``hwtune serve`` calls it when the store's file changes or vanishes)."""
    _cached.cache_clear()


def select_attention(
    spec: AttentionSpec,
    device: DeviceArg = "auto",
    backend: str | None = None,
    *,
    assume_installed: bool = False,
    db: str | bool | None = None,
    max_num_seqs: int = 256,
    max_model_len: int = 32768,
    profile: str = "balanced",
    engine: str | None = DEFAULT_ENGINE,
    engine_version: str | None = None,
    distributed: bool = True,
    group: Any = None,
    on_disagreement: str = "use_rank0",
    full_attention_layers: int | None = None,
    num_layers: int | None = None,
) -> Selection:
    """Rank the valid attention backends for ``spec`` on ``device`` for the engine that will run them.

    ``engine`` ("vllm", the default, or "sglang") at ``engine_version`` (default: the newest hwtune has a snapshot
    of) decides which backends exist, which accept the spec and in which order they are tried when nothing was
    measured: that version's own rules (docs/engines.md), except where hwtune deliberately differs (listed in
    ``Selection.differences``). ``engine=None`` (or "none") ranks hwtune's own catalogue instead: every kernel
    hwtune runs, its own kernels included, by their kernel-level rules.

    Ranking uses this environment's measurements from the store (``db``: a URL; None: HWTUNE_DATABASE_URL or
    the local store; False: none) over the engine's workload mix (``max_num_seqs``, ``max_model_len`` and a
    ``profile``: decode-heavy, balanced, prefill-heavy, or a weights file), and falls back to static
    priorities. ``backend`` (or HWTUNE_ATTENTION_BACKEND) is honoured when valid; when not,
    ``BackendNotValidError`` says why. Warm calls with the same arguments are served from a cache.

    Inside an initialised torch.distributed group (``group``, default the world) the call is collective: every
    rank must call it, and every rank returns the same choice: rank 0's when the ranks differ
    (``on_disagreement="use_rank0"``, noted in the Selection), or ``RanksDisagreeError`` on every rank
    (``"raise"``); ``distributed=False`` opts out. See ``hwtune.selector.ranks``.

    A model whose layers mix sliding-window and full attention (gpt-oss: the config's ``layer_types``) gives
    ``spec`` for its windowed layers and ``full_attention_layers`` of ``num_layers``: one backend is then ranked by
    its cost over every layer (``hwtune.selector.layer_kinds``; ``load_model_config`` reads both counts).
    """

    def local() -> Selection:
        if not isinstance(spec, AttentionSpec):
            raise TypeError("select_attention needs an AttentionSpec")
        check_layers(spec, full_attention_layers, num_layers)  # exit 2 for counts that do not describe a mix
        requested, how = _requested("attention", backend)
        target = resolve_target(engine or "none", engine_version)  # unknown engine or version: exit 2
        dev = resolve_device(device)
        args = (requested, how, assume_installed, db, max_num_seqs, max_model_len, profile, target)
        layers = (full_attention_layers, num_layers) if full_attention_layers and num_layers else None
        return _cached("attention", spec, dev, *args, layers)

    return agree(local, distributed=distributed, group=group, on_disagreement=on_disagreement)


def select_all2all(
    spec: All2AllSpec,
    device: DeviceArg = "auto",
    backend: str | None = None,
    *,
    assume_installed: bool = False,
    db: str | bool | None = None,
    max_num_seqs: int = 256,
    profile: str = "balanced",
    distributed: bool = True,
    group: Any = None,
    on_disagreement: str = "use_rank0",
) -> Selection:
    """Rank the valid MoE all2all backends for ``spec`` on ``device`` (see select_attention); collective, with
    every rank returning the same choice, inside an initialised torch.distributed group (``hwtune.selector.ranks``).
    """

    def local() -> Selection:
        if not isinstance(spec, All2AllSpec):
            raise TypeError("select_all2all needs an All2AllSpec")
        requested, how = _requested("all2all", backend)
        return _cached(
            "all2all", spec, resolve_device(device), requested, how, assume_installed, db, max_num_seqs, 0, profile
        )

    return agree(local, distributed=distributed, group=group, on_disagreement=on_disagreement)
