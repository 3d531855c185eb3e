"""The library entry the tuner calls: measure a workload's candidates, one record per (backend, tactic).

Validation comes first and decides what runs: a candidate the catalogue rejects for this spec and device
is recorded ``unsupported`` with its reasons and never started. Everything else runs in the isolated
worker (``WorkerPool``); the parent never runs a candidate kernel itself.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable, Sequence

from hwtune.core import catalogue
from hwtune.core.catalogue import Backend, Feature
from hwtune.core.devices import CPU_PROFILE, DeviceProfile
from hwtune.core.environment import current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import MeasurementRecord
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.core.validation import check, check_tactic
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.contract import to_record
from hwtune.probes.timing import TimingOptions


def tactic_phases(workload: AttentionWorkload) -> tuple[str, ...]:
    """Catalogue phases a tactic must serve for this workload (mixed batches need both)."""
    return ("decode", "prefill") if workload.phase == "mixed" else (workload.phase,)


@dataclasses.dataclass(frozen=True)
class Planned:
    """One candidate for one workload: runnable, or unsupported with the catalogue's reasons."""

    backend: str
    tactic: str
    reasons: tuple[str, ...] = ()

    @property
    def runnable(self) -> bool:
        """Whether the catalogue found no reason against it; the others are recorded as unsupported, with these
        reasons, without starting a worker."""
        return not self.reasons


def plan_candidates(
    workload: AttentionWorkload,
    device: DeviceProfile,
    backends: Iterable[str] | None = None,
    *,
    assume_installed: bool = False,
    other_layers: Sequence[AttentionSpec] = (),
) -> list[Planned]:
    """Every (backend, tactic) to try for ``workload`` (MLA backends only for MLA specs).

    ``backends`` entries are names ("FLASHINFER") or name:tactic ("HWTUNE_TRITON_ATTN:auto") to keep one tactic.
    A list that names backends of both kinds (a plan's defaults: the quick list holds MLA and non-MLA backends)
    keeps those of the workload's kind, as no list does; a list of the other kind only is planned as given, so that
    each entry is recorded unsupported with its reason.
    ``other_layers``: the specs of the model's other kinds of layers (``Plan.other_layer_specs``). The engine runs one
    attention backend for every layer, so a backend that cannot serve one of them is recorded unsupported here too,
    with that kind's reasons, rather than timed where it can never be chosen.
    """
    only: dict[str, set[str]] = {}
    for entry in backends or ():
        name, _, tactic = entry.partition(":")
        b = catalogue.get("attention", name)
        if tactic and b.tactic(tactic) is None:
            raise InvalidSpecError(
                f"{b.name} has no tactic {tactic!r}; its tactics: {', '.join(t.name for t in b.tactics)}"
            )
        only.setdefault(b.name, set()).update({tactic} if tactic else {t.name for t in b.tactics})
    chosen: list[Backend] = (
        [catalogue.get("attention", b) for b in only] if backends is not None else list(catalogue.backends("attention"))
    )
    phases = tactic_phases(workload)
    out: list[Planned] = []
    of_kind = [b for b in chosen if b.has(Feature.MLA) == workload.spec.use_mla]
    for b in chosen:
        if b.has(Feature.MLA) != workload.spec.use_mla and (backends is None or of_kind):
            continue  # not even a candidate: listed in `select` rejections instead
        backend_reasons = [r.message for r in check(b, workload.spec, device, assume_installed=assume_installed)]
        backend_reasons = backend_reasons or _other_layer_reasons(b, other_layers, device, assume_installed)
        if not backend_reasons and b.probe is not None and not b.probe.measures(workload.phase):
            backend_reasons = [
                f"hwtune measures {b.name} in {', '.join(sorted(b.probe.phases or ()))} only: {b.probe.phases_why}"
            ]
        for t in b.tactics:
            if not all(p in t.phases for p in phases) or (only and t.name not in only[b.name]):
                continue
            reasons = backend_reasons or [
                r.message for r in check_tactic(b, t, workload.spec, device, assume_installed=assume_installed)
            ]
            out.append(Planned(b.name, t.name, tuple(reasons)))
    return out


def _other_layer_reasons(
    backend: Backend, others: Sequence[AttentionSpec], device: DeviceProfile, assume_installed: bool
) -> list[str]:
    """Why ``backend`` cannot serve the model's other kinds of layers (``plan_candidates``); empty if it can."""
    out = []
    for spec in others:
        why = " ".join(r.message for r in check(backend, spec, device, assume_installed=assume_installed))
        if why:
            kind = f"{spec.sliding_window}-token sliding-window" if spec.sliding_window else "full-attention"
            out.append(
                f"Not measured: {backend.name} cannot serve this model's {kind} layers, and the engine runs one "
                f"attention backend for every layer. There: {why}"
            )
    return out


def measure_attention(
    workload: AttentionWorkload,
    candidates: Sequence[Planned] | None = None,
    *,
    device: str = "cuda",
    profile: DeviceProfile | None = None,
    timing: TimingOptions | None = None,
    timeout_s: float = 300.0,
    run_id: str | None = None,
    pool: WorkerPool | None = None,
    seed: int = 0,
    on_record: Callable[[MeasurementRecord], None] | None = None,
    candidate_override: dict[str, str] | None = None,
) -> list[MeasurementRecord]:
    """Measure every planned candidate of ``workload``; one record each, written via ``on_record`` as soon
    as it exists (so an interrupted run loses nothing already measured)."""
    if profile is None:
        from hwtune.core.detect import detect

        profile = detect() if device == "cuda" else CPU_PROFILE
    env = current_environment(profile)
    timing = timing or TimingOptions()
    planned = list(candidates) if candidates is not None else plan_candidates(workload, profile)
    own_pool = pool is None
    pool = pool or WorkerPool()
    records: list[MeasurementRecord] = []
    try:
        for c in planned:
            started = time.monotonic()
            if not c.runnable:
                result = {"status": "unsupported", "message": " ".join(c.reasons)}
            else:
                job = {
                    "workload": workload.to_dict(),
                    "backend": c.backend,
                    "tactic": c.tactic,
                    "device": device,
                    "seed": seed,
                    "timing": dataclasses.asdict(timing),
                    "candidate": (candidate_override or {}).get(c.backend),
                }
                result = pool.run(job, timeout_s)
            wall = {"wall_s": round(time.monotonic() - started, 3)} if c.runnable else None
            rec = to_record("attention", workload, c.backend, c.tactic, result, env=env, run_id=run_id, extra=wall)
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    finally:
        if own_pool:
            pool.close()
    return records
