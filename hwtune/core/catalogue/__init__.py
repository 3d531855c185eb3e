"""The backend catalogue: every backend hwtune can recommend, one record each, as data.

A record (``Backend``) is the one place that names a backend and says everything about it: its rules with
sources, its tactics and compile estimates, the probe that runs it, its engine flags, its static priority
per architecture family and its tactic order. Priorities, engine adapters, probe registries, plans and
warm-up derive from the records; nothing else spells a backend's name.
"""

from __future__ import annotations

from hwtune.core.catalogue.all2all import ALL2ALL_BACKENDS
from hwtune.core.catalogue.attention import ATTENTION_BACKENDS
from hwtune.core.catalogue.base import (
    FEATURE_WORDS,
    All2AllRules,
    AttentionRules,
    Backend,
    CCRange,
    EngineFlags,
    Feature,
    Hazard,
    IntRule,
    Probe,
    Tactic,
)
from hwtune.core.catalogue.mla import MLA_BACKENDS
from hwtune.core.errors import UnknownBackendError

_ALL: dict[str, tuple[Backend, ...]] = {
    "attention": ATTENTION_BACKENDS + MLA_BACKENDS,
    "all2all": ALL2ALL_BACKENDS,
}
_BY_NAME: dict[tuple[str, str], Backend] = {
    (kind, b.name.lower()): b for kind, backends in _ALL.items() for b in backends
}
#: Accepted older spellings, as vLLM accepts them.
_ALIASES: dict[tuple[str, str], str] = {("all2all", "flashinfer_all2allv"): "flashinfer_nvlink_two_sided"}


#: Names measurements were recorded under before hwtune's own kernels got names of their own (2026-11-25):
#: every attention measurement named TRITON_ATTN or TURBOQUANT before then is hwtune's kernel (no build ever
#: measured vLLM's backends of those names). Store migration 0003 and the JSON Lines import read them as today's.
RENAMED_MEASUREMENTS: dict[str, str] = {"TRITON_ATTN": "HWTUNE_TRITON_ATTN", "TURBOQUANT": "HWTUNE_TURBOQUANT"}


def backends(kind: str) -> tuple[Backend, ...]:
    """All declared backends of a kind ("attention" or "all2all")."""
    if kind not in _ALL:
        raise ValueError(f"unknown backend kind {kind!r}; known: attention, all2all")
    return _ALL[kind]


def names(kind: str) -> list[str]:
    """Backend names of a kind in declaration order (the list an unknown-name error offers)."""
    return [b.name for b in backends(kind)]


def get(kind: str, name: str) -> Backend:
    """Look a backend up by name, case-insensitively; unknown names list the known ones."""
    key = name.strip().lower()
    key = _ALIASES.get((kind, key), key)
    try:
        return _BY_NAME[(kind, key)]
    except KeyError:
        raise UnknownBackendError(name, kind, names(kind)) from None


def find(name: str) -> Backend | None:
    """The backend of any kind called ``name`` (case-insensitive; names are unique across kinds), or None."""
    key = name.strip().lower()
    for kind in _ALL:
        found = _BY_NAME.get((kind, _ALIASES.get((kind, key), key)))
        if found is not None:
            return found
    return None


def covered(backend: str, tactic: str) -> tuple[str, ...]:
    """The tactics of ``backend`` that its ``tactic`` covers (``Tactic.covers``); none for an unknown name."""
    found = find(backend)
    declared = found.tactic(tactic) if found is not None else None
    return declared.covers if declared is not None else ()


def get_any(name: str) -> Backend:
    """Like ``find``, but an unknown name is an UnknownBackendError listing every known backend."""
    found = find(name)
    if found is None:
        raise UnknownBackendError(name, "attention or all2all", [n for kind in _ALL for n in names(kind)])
    return found


def engine_record(engine: str, name: str, mla: bool) -> tuple[Backend, str | None] | None:
    """The record hwtune measures an engine's attention backend ``name`` by, and the tactic when the engine names one
    tactic of it (SGLang's trtllm_mha is FLASHINFER's trtllm-gen), from the records' engine flags; None when
    hwtune runs no kernel of that backend (vLLM's TRITON_ATTN, SGLang's triton: the engines' own kernels)."""
    flag = ("--attention-backend", name)
    for b in _ALL["attention"]:
        flags = b.engines.get(engine)
        if flags is None or b.has(Feature.MLA) != mla:
            continue
        if flags.args == flag:
            return b, None
        tactic = next((t for t, args in flags.by_tactic.items() if args == flag), None)
        if tactic is not None:
            return b, tactic
    return None


def quick_backends(kind: str, device_type: str = "cuda") -> tuple[str, ...]:
    """What ``hwtune tune --quick`` measures of ``kind`` on ``device_type``: backend names, or ``NAME:tactic``
    for one tactic. Where none of the quick backends runs on that device type (the CPU), every backend hwtune
    can run there, so that a quick tune always measures what can run."""
    runs_here = [b for b in backends(kind) if b.probe and device_type in (b.rules.device_types or ())]
    quick = tuple(n for b in runs_here for n in b.quick_names())
    return quick or tuple(b.name for b in runs_here)


__all__ = [
    "RENAMED_MEASUREMENTS",
    "Backend",
    "Tactic",
    "Feature",
    "FEATURE_WORDS",
    "Hazard",
    "IntRule",
    "CCRange",
    "AttentionRules",
    "All2AllRules",
    "EngineFlags",
    "Probe",
    "backends",
    "names",
    "get",
    "find",
    "get_any",
    "quick_backends",
    "engine_record",
]
