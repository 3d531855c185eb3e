"""The backend catalogue: every backend hwtune can recommend, as data."""

from __future__ import annotations

from hwtune.core.catalogue.all2all import ALL2ALL_BACKENDS
from hwtune.core.catalogue.attention import ATTENTION_BACKENDS
from hwtune.core.catalogue.base import (
    FEATURE_WORDS, All2AllRules, AttentionRules, Backend, CCRange, Feature, Hazard, IntRule, Tactic,
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


def backends(kind: str) -> tuple[Backend, ...]:
    """All declared backends of a kind ("attention" or "all2all")."""
    if kind not in _ALL:
        raise ValueError(f"unknown backend kind {kind!r}; known: attention, all2all")
    return _ALL[kind]


def names(kind: str) -> list[str]:
    return [b.name for b in backends(kind)]


def get(kind: str, name: str) -> Backend:
    """Look a backend up by name, case-insensitively; unknown names list the known ones."""
    key = name.strip().lower()
    key = _ALIASES.get((kind, key), key)
    try:
        return _BY_NAME[(kind, key)]
    except KeyError:
        raise UnknownBackendError(name, kind, names(kind)) from None


__all__ = [
    "Backend", "Tactic", "Feature", "FEATURE_WORDS", "Hazard", "IntRule", "CCRange", "AttentionRules",
    "All2AllRules",
    "backends", "names", "get",
]
