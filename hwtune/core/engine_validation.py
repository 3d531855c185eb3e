"""Validation for an engine target: can engine version X's backend serve this spec on this device?

The rules are the engine version's own (its snapshot, ``hwtune.core.catalogue.engines``), worded as every other
rejection: a validating engine's (vLLM's) selector checks, or what a deciding engine (SGLang) accepts when a backend
is given explicitly. Where hwtune deliberately differs from the engine, it is stricter in one way only: a backend the
engine's selector accepts but which then fails when the engine starts or runs its first batch (the snapshot's
``start_checks``, each with the engine source that raises) is rejected up front, with a reason that says so.
Packages of the record hwtune measures the backend by are checked as for hwtune's own catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.core import catalogue
from hwtune.core.catalogue.base import Feature
from hwtune.core.catalogue.engines import (
    EngineConfig,
    EngineReason,
    EngineTarget,
    engine_config,
    explicit_reasons,
    selection_reasons,
    short_source,
    start_reasons,
)
from hwtune.core.devices import DeviceProfile
from hwtune.core.packages import installed_version
from hwtune.core.types import AttentionSpec
from hwtune.core.validation import Rejection, feature_sentence, package_rejections

#: Rejection codes of hwtune's deliberate differences from an engine start with this prefix.
DELIBERATE = "deliberate:"


@dataclass(frozen=True)
class EngineVerdict:
    """One engine backend judged for a spec: what the engine's selector refuses (``engine``), what hwtune refuses
    on purpose although the engine's selector accepts it (``deliberate``), and missing packages."""

    name: str
    engine: list[Rejection]
    deliberate: list[Rejection]
    packages: list[Rejection]

    @property
    def reasons(self) -> list[Rejection]:
        """Every reason, in that order (empty: valid)."""
        return self.engine + self.deliberate + self.packages


def config_for(
    target: EngineTarget, spec: AttentionSpec, device: DeviceProfile, assume_installed: bool
) -> EngineConfig:
    """The engine configuration of ``spec`` on ``device``; optional packages the snapshot's checks name are looked
    up by their metadata (all assumed present with ``assume_installed``)."""
    if assume_installed:
        return engine_config(spec, device, None)
    names = {
        pkg
        for facts in target.snapshot.data.get("backends", {}).values()
        for check in facts.get("checks", [])
        for pkg in check.get("require", {}).get("installed", [])
    }
    return engine_config(spec, device, frozenset(n for n in names if installed_version(n)))


def _worded(reason: EngineReason, spec: AttentionSpec, who: str) -> Rejection:
    if reason.code.startswith("feature:"):
        return Rejection(reason.code, feature_sentence(Feature(reason.code[len("feature:") :]), spec, who))
    return Rejection(reason.code, reason.message)


def judge(
    target: EngineTarget,
    name: str,
    spec: AttentionSpec,
    device: DeviceProfile,
    cfg: EngineConfig,
    *,
    assume_installed: bool,
) -> EngineVerdict:
    """Engine version ``target``'s backend ``name`` (the engine's spelling) judged for ``spec`` on CUDA ``device``: by
    a validating engine's selector rules, or, for a deciding engine (SGLang), by what it accepts when ``name`` is given
    explicitly (its default is decided apart: ``decide``)."""
    snap, who = target.snapshot, f"{target.describe()}'s {name}"
    if snap.selector == "decision":
        reasons = explicit_reasons(snap, target.version, name, cfg)
    else:
        reasons = selection_reasons(snap, target.version, name, cfg)
    refused = [_worded(r, spec, who) for r in reasons]
    deliberate = []
    if not refused and snap.selector != "decision":
        for r in start_reasons(snap, target.version, name, cfg):
            deliberate.append(
                Rejection(
                    DELIBERATE + r.check_id,
                    f"{r.message[:-1]}; hwtune rejects it up front, although {target.describe()}'s selector would "
                    f"take it ({short_source(r.source)}).",
                )
            )
    mapped = catalogue.engine_record(target.engine, name, cfg.mla)
    packages = (
        package_rejections(mapped[0], assume_installed=assume_installed, device=device, who=name)
        if mapped is not None
        else []
    )
    return EngineVerdict(name, refused, deliberate, packages)
